"""Deliveries of the event outbox (app/core/events.py) to the outside: signed webhooks, e-mail."""

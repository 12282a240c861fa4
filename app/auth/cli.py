"""`chargeback user ...` and `chargeback token ...` (mounted at top level by app/cli.py)."""

from __future__ import annotations

import os
import secrets

import typer

from app.core.errors import AppError

app = typer.Typer(help="auth commands", no_args_is_help=True)
user_app = typer.Typer(help="Portal users", no_args_is_help=True)
token_app = typer.Typer(help="API tokens", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")

CLI_ACTOR = "cli"


def _fail(error: AppError) -> None:
    typer.echo(f"error: {error}", err=True)
    raise typer.Exit(code=2)


@user_app.command("create")
def user_create(
    name: str = typer.Argument(..., help="User name (letters, digits, . _ @ -)"),
    role: str = typer.Option(..., "--role", help="admin, operator, reviewer, finance, viewer or tenant"),
    tenant: list[str] = typer.Option([], "--tenant", help="Tenant a `tenant` member may read (repeatable)"),
    password_env: str | None = typer.Option(
        None, "--password-env", help="Read the password from this environment variable instead of generating one"
    ),
) -> None:
    """Create a user. Without --password-env a random password is generated and printed once."""
    from app.auth import service
    from app.core.db import unit_of_work

    if password_env:
        password = os.environ.get(password_env)
        if not password:
            typer.echo(f"error: environment variable {password_env} is not set or empty", err=True)
            raise typer.Exit(code=2)
        generated = False
    else:
        password, generated = secrets.token_urlsafe(15), True
    try:
        with unit_of_work() as session:
            user = service.create_user(session=session, name=name, role=role, password=password, tenants=tenant,
                                       actor=CLI_ACTOR)
            user_id = user.id
    except AppError as error:
        _fail(error)
    typer.echo(f"user {name} created (id {user_id}, role {role}{', tenants ' + ', '.join(tenant) if tenant else ''})")
    if generated:
        typer.echo(f"one-time password: {password}")
        typer.echo("It is not stored anywhere; change it after the first sign-in if you like.")


@user_app.command("list")
def user_list() -> None:
    """List users with role, tenants and state."""
    from app.auth import service
    from app.core.db import unit_of_work

    with unit_of_work() as session:
        for user, tenants in service.list_users(session=session):
            state = "active" if user.active else "inactive"
            typer.echo(f"{user.name}\t{user.role}\t{','.join(tenants) or '-'}\t{state}")


@token_app.command("create")
def token_create(
    user: str = typer.Option(..., "--user", help="The user the token acts as"),
    scopes: str = typer.Option("read", "--scopes", help="read and/or write, comma-separated"),
    expires: str = typer.Option("90d", "--expires", help="Lifetime such as 90d, 12h or 2w (at most 366d)"),
    label: str = typer.Option("", "--label", help="What the token is for"),
) -> None:
    """Create an API token and print it once (only its hash is stored)."""
    from app.auth import service, tokens
    from app.core.db import unit_of_work

    try:
        lifetime = tokens.parse_lifetime(expires, path="--expires")
        with unit_of_work() as session:
            owner = service.get_user_by_name(session=session, name=user)
            row, raw = service.create_token(session=session, user=owner, scopes=scopes, lifetime=lifetime,
                                            label=label, actor=CLI_ACTOR)
            summary = f"token {row.id} for {user}, scopes {row.scopes}, expires {row.expires_at:%Y-%m-%d %H:%M} UTC"
    except AppError as error:
        _fail(error)
    typer.echo(summary, err=True)
    # The token alone on stdout, so that scripts can capture it: TOKEN=$(chargeback token create ...)
    typer.echo(raw)


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="Token id (see `token list`)")) -> None:
    """Revoke a token."""
    from app.auth import service
    from app.core.db import unit_of_work

    try:
        with unit_of_work() as session:
            row = service.revoke_token(session=session, token_id=token_id, actor=CLI_ACTOR)
            prefix = row.prefix
    except AppError as error:
        _fail(error)
    typer.echo(f"token {token_id} ({prefix}…) revoked")


@token_app.command("list")
def token_list(user: str | None = typer.Option(None, "--user", help="Only this user's tokens")) -> None:
    """List tokens (prefix, owner, scopes, expiry, state); never the tokens themselves."""
    from app.auth import service
    from app.core.db import unit_of_work
    from app.core.timeutil import aware, utcnow

    with unit_of_work() as session:
        user_id = service.get_user_by_name(session=session, name=user).id if user else None
        now = utcnow()
        for row, owner in service.list_tokens(session=session, user_id=user_id):
            state = "revoked" if row.revoked_at else ("expired" if aware(row.expires_at) <= now else "active")
            typer.echo(f"{row.id}\t{row.prefix}…\t{owner}\t{row.scopes}\t{row.expires_at:%Y-%m-%d}\t{state}")

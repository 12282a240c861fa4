"""The per-process answer cache: fresh for its TTL, bounded, and emptied everywhere by clear_all."""

from __future__ import annotations

from app.core.cache import TtlCache, clear_all


def test_a_value_is_fresh_for_its_ttl_then_computed_again():
    clock = [0.0]
    cache = TtlCache(ttl_s=30, clock=lambda: clock[0])
    computed = []
    assert cache.get("k", lambda: computed.append(1) or len(computed)) == 1
    clock[0] = 29.9
    assert cache.get("k", lambda: computed.append(1) or len(computed)) == 1
    clock[0] = 30.0
    assert cache.get("k", lambda: computed.append(1) or len(computed)) == 2
    assert cache.computations == 2


def test_a_full_cache_starts_again_empty():
    cache = TtlCache(ttl_s=60, max_entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == (True, 1)
    cache.put("c", 3)
    assert cache.peek("a") == (False, None) and cache.peek("c") == (True, 3)


def test_clear_all_empties_every_cache_of_the_process():
    first, second = TtlCache(ttl_s=60), TtlCache(ttl_s=60)
    first.put("k", 1)
    second.put("k", 2)
    clear_all()
    assert first.peek("k") == (False, None) and second.peek("k") == (False, None)

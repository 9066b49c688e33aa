"""The sentence cache: what its key holds, and both of its bounds."""

from __future__ import annotations

import tracemalloc

from handlers.sentence_cache import SentenceCache, cache_key


def test_key_separates_model_options_and_ids() -> None:
    base = cache_key("zh_en/1.0-int8/int8", (4, None, None), [5, 6, 0])
    assert base == cache_key("zh_en/1.0-int8/int8", (4, None, None), (5, 6, 0))
    assert base != cache_key("zh_en/1.0-fp32/fp32", (4, None, None), [5, 6, 0])
    assert base != cache_key("zh_en/1.0-int8/int8", (1, None, None), [5, 6, 0])
    assert base != cache_key("zh_en/1.0-int8/int8", (4, 10, None), [5, 6, 0])
    assert base != cache_key("zh_en/1.0-int8/int8", (4, None, None), [5, 7, 0])


def test_least_recently_used_goes_first_when_entries_run_out() -> None:
    cache = SentenceCache(max_entries=2, max_bytes=10**6)
    a, b, c = (cache_key("m", (), [n]) for n in range(3))
    cache.put(a, "A")
    cache.put(b, "B")
    assert cache.get(a) == "A"  # a is now the most recent
    cache.put(c, "C")
    assert cache.get(b) is None
    assert (cache.get(a), cache.get(c)) == ("A", "C")
    stats = cache.stats()
    assert (stats.entries, stats.hits, stats.misses) == (2, 3, 1)


def test_byte_bound_evicts_and_refuses_an_entry_larger_than_the_cache() -> None:
    # Each entry holds a 100-character text and 10 ids: at least 100 bytes of it, so a
    # 1,000-byte cache can hold no more than 9 of them whatever the bookkeeping charges.
    cache = SentenceCache(max_entries=100, max_bytes=1_000)
    for n in range(20):
        cache.put(cache_key("m", (), [n, *range(1, 10)]), "x" * 100)
    assert 1 <= cache.stats().entries < 10
    assert cache.stats().bytes <= 1_000
    assert cache.get(cache_key("m", (), [19, *range(1, 10)])) == "x" * 100  # the newest stays
    assert cache.get(cache_key("m", (), [0, *range(1, 10)])) is None  # the oldest went first
    held = cache.stats().entries
    cache.put(cache_key("m", (), [99]), "y" * 2_000)  # larger than the whole cache: refused
    assert cache.get(cache_key("m", (), [99])) is None
    assert cache.stats().entries == held


def test_the_byte_count_tracks_the_memory_the_entries_really_take() -> None:
    """The bound is only as good as its estimate: compare it with what Python allocates."""
    cache = SentenceCache(max_entries=10_000, max_bytes=10**9)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(2_000):
        ids = [n, *range(1, 1 + n % 40)]
        cache.put(cache_key("zh_en/1.0-int8/int8", (4, None, None), ids), f"Translation number {n}." * 3)
    allocated = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert 0.5 <= cache.stats().bytes / allocated <= 2.0, (cache.stats().bytes, allocated)


def test_replacing_a_key_does_not_leak_bytes() -> None:
    cache = SentenceCache(max_entries=10, max_bytes=10**6)
    key = cache_key("m", (), [1, 2])
    cache.put(key, "short")
    once = cache.stats().bytes
    cache.put(key, "a longer translation")
    cache.put(key, "short")
    assert cache.stats().entries == 1
    assert cache.stats().bytes == once


def test_size_zero_disables_it() -> None:
    cache = SentenceCache(max_entries=0, max_bytes=10**6)
    cache.put(cache_key("m", (), [1]), "A")
    assert cache.get(cache_key("m", (), [1])) is None

"""The sentence cache: what its key holds, and both of its bounds."""

from __future__ import annotations

from handlers.sentence_cache import SentenceCache, cache_key, entry_bytes


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
    key = cache_key("m", (), list(range(10)))
    size = entry_bytes(key, "x" * 100)
    cache = SentenceCache(max_entries=100, max_bytes=2 * size)
    for n in range(5):
        cache.put(cache_key("m", (), [n, *range(1, 10)]), "x" * 100)
    assert cache.stats().entries == 2
    assert cache.stats().bytes <= 2 * size
    cache.put(cache_key("m", (), [99]), "y" * (3 * size))
    assert cache.get(cache_key("m", (), [99])) is None
    assert cache.stats().entries == 2


def test_replacing_a_key_does_not_leak_bytes() -> None:
    cache = SentenceCache(max_entries=10, max_bytes=10**6)
    key = cache_key("m", (), [1, 2])
    cache.put(key, "short")
    cache.put(key, "a longer translation")
    assert cache.stats().entries == 1
    assert cache.stats().bytes == entry_bytes(key, "a longer translation")


def test_size_zero_disables_it() -> None:
    cache = SentenceCache(max_entries=0, max_bytes=10**6)
    cache.put(cache_key("m", (), [1]), "A")
    assert cache.get(cache_key("m", (), [1])) is None

import pytest

import directory
from avatars import avatar_url
from cache import CACHE, TTLCache
from orders import order_page


@pytest.fixture(autouse=True)
def fresh_cache():
    CACHE.clear()
    directory.LOOKUPS.clear()


def test_avatar_is_cached():
    assert avatar_url(11, 64) == "https://img.example.net/64x64/ben.jpg"
    assert avatar_url(11, 64) == "https://img.example.net/64x64/ben.jpg"
    assert directory.LOOKUPS == ["user 11"]


def test_each_user_sees_their_own_avatar():
    assert avatar_url(1, 28) == "https://img.example.net/28x28/ana.png"
    assert avatar_url(12, 8) == "https://img.example.net/8x8/chen.png"


def test_order_pages():
    assert order_page(1, 3) == [f"A{n}" for n in range(21, 26)]
    assert order_page(12, 2) == ["C11", "C12"]


def test_entries_expire():
    now = [0.0]
    cache = TTLCache(ttl=10, clock=lambda: now[0])
    assert cache.get_or_compute("k", lambda: 1) == 1
    now[0] = 11
    assert cache.get_or_compute("k", lambda: 2) == 2

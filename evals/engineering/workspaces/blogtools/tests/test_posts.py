from datetime import date

from posts import Post, index


def test_post_url_uses_the_slug():
    assert Post("Hello, World", date(2024, 5, 1)).url == "/posts/hello-world"


def test_index_lists_newest_first():
    posts = [Post("Old", date(2023, 1, 1)), Post("New", date(2024, 1, 1))]
    assert index(posts) == ["2024-01-01  New  /posts/new", "2023-01-01  Old  /posts/old"]

from slug import slugify


def test_words_are_joined_by_hyphens():
    assert slugify("My First Post!") == "my-first-post"


def test_accents_are_dropped():
    assert slugify("Café au lait") == "cafe-au-lait"


def test_long_titles_are_cut_at_a_word():
    slug = slugify("word " * 30, max_length=22)
    assert slug == "word-word-word-word"


def test_separator_can_be_chosen():
    assert slugify("Release Notes 2.0", sep=".") == "release.notes.2.0"

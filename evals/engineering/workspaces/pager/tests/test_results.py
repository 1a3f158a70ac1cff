from results import render


def test_first_page_numbers_hits_and_links_forward():
    text = render(["a", "b", "c", "d"], 1, per_page=2)
    assert text.splitlines() == ["1. a", "2. b", "page 1/2 | next >"]


def test_every_hit_is_reachable():
    hits = [f"hit {i}" for i in range(1, 11)]
    shown = []
    number = 1
    while True:
        text = render(hits, number, per_page=3)
        shown += [line.split(". ", 1)[1] for line in text.splitlines() if ". " in line]
        if "next >" not in text:
            break
        number += 1
    assert shown == hits

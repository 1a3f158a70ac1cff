from leaderboard import Entry, ranking, render, totals

ROUNDS = [
    {"Quizzly Bears": 7, "Les Quizerables": 9, "Trivia Newton-John": 4},
    {"Quizzly Bears": 8, "Les Quizerables": 5, "Trivia Newton-John": 10},
]


def test_totals_add_up_the_rounds():
    assert sorted(totals(ROUNDS), key=lambda e: e.team) == [
        Entry("Les Quizerables", 14),
        Entry("Quizzly Bears", 15),
        Entry("Trivia Newton-John", 14),
    ]


def test_best_team_comes_first():
    assert ranking(totals(ROUNDS))[0] == Entry("Quizzly Bears", 15)


def test_ties_are_alphabetical():
    teams = [e.team for e in ranking(totals(ROUNDS))]
    assert teams[1:] == ["Les Quizerables", "Trivia Newton-John"]


def test_render_numbers_the_places():
    assert render([Entry("A", 3), Entry("B", 5)]).splitlines()[0].startswith(" 1. B")

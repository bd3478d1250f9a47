"""Small KGs and case lists written as tables in tests: one row a line, cells separated by ``|``."""


def rows(table: str) -> list[tuple[str, ...]]:
    """The non-blank lines of ``table`` as tuples of their ``|``-separated cells, each stripped."""
    return [tuple(cell.strip() for cell in line.split("|")) for line in table.strip().splitlines() if line.strip()]


# Two clubs, two positions: only Ana plays for Club_X as a Forward (one condition alone leaves two players).
CLUBS_AND_POSITIONS = rows("""
    Ana | plays_in_club  | Club_X
    Ben | plays_in_club  | Club_X
    Cai | plays_in_club  | Club_Y
    Ana | plays_position | Forward
    Cai | plays_position | Forward
    Ben | plays_position | Goalkeeper
""")

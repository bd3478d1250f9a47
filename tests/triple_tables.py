"""Small KGs and case lists written as tables in tests: one row a line, cells separated by ``|``."""


def rows(table: str) -> list[tuple[str, ...]]:
    """The non-blank lines of ``table`` as tuples of their ``|``-separated cells, each stripped."""
    return [tuple(cell.strip() for cell in line.split("|")) for line in table.strip().splitlines() if line.strip()]

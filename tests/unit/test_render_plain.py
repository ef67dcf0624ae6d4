"""render.table's own layout of plain ASCII tables is byte for byte what tabulate's "plain" format prints (the
renderer falls back to tabulate for anything else)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from kubectl_runs.render import _plain_fits, _plain_table

# Every printable ASCII character (render.clean has turned control characters into spaces by then), and cells
# that look like numbers, percentages, "-" and "<none>", as the reports print them.
cells = st.one_of(
    st.text(alphabet="".join(map(chr, range(0x20, 0x7F))), max_size=12),
    st.sampled_from(["-", "<none>", "0", "1,024", "-3", "12.5%", "1e30", "0x1f", "inf", "nan", "True", " 7 "]),
)


@st.composite
def tables(draw):
    columns = draw(st.integers(min_value=1, max_value=7))
    rows = draw(st.integers(min_value=1, max_value=10))
    body = [[draw(cells) for _ in range(columns)] for _ in range(rows)]
    aligns = [draw(st.sampled_from(["left", "right"])) for _ in range(columns)]
    return body, aligns


@settings(max_examples=1000, deadline=None)
@given(tables())
def test_plain_layout_is_tabulates(table):
    body, aligns = table
    if not _plain_fits(body, aligns):  # a row of blank cells: tabulate's own business
        assert any(not any(c.strip() for c in row) for row in body)
        return
    expected = tabulate(body, tablefmt="plain", colalign=aligns, disable_numparse=True)
    assert _plain_table(body, aligns) == "\n".join(line.rstrip() for line in expected.splitlines())


def test_other_tables_go_to_tabulate():
    assert not _plain_fits([["naïve", "x"]], ["left", "left"])
    assert not _plain_fits([["a"]], ["center"])
    assert not _plain_fits([], [])
    assert not _plain_fits([["a"], [" "]], ["left"])

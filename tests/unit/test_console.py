"""Output helpers: user text printed literally, tables for pipes as plain columns."""

from __future__ import annotations

from infbench.console import plain_table


def test_plain_table_aligns_columns_and_keeps_each_row_on_one_line() -> None:
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>" * 3
    text = plain_table("Top kernels [bold]x[/bold] :100:", ["rank", "name", "sum_us"],
                       [["0", long, "1,985.00"], ["12", "Memset (Device)", "3"]])
    lines = text.splitlines()
    assert lines[0] == "Top kernels [bold]x[/bold] :100:"  # literal: no markup, no emoji
    assert len(lines) == 4 and text.endswith("\n")
    header, first, second = lines[1:]
    # Every column starts where its header does, two spaces after the widest cell before it.
    for col in ("name", "sum_us"):
        at = header.index(col)
        assert first[at - 2:at] == "  " and second[at - 2:at] == "  "
    assert header.index("name") == len("rank") + 2
    assert first.startswith("0     void") and long in first and first.endswith("1,985.00")
    assert second.startswith("12    Memset (Device)")
    assert not any(ch in text for ch in "┏━│└")


def test_plain_table_of_no_rows_is_its_title_and_header() -> None:
    assert plain_table("Idle", ["a", "bb"], []) == "Idle\na  bb\n"

"""How a message's files enter its prompt (context/attachments.py): whole when they fit,
else the chunks that share the message's words, in the file's order."""

from __future__ import annotations

from parley.context.attachments import HEADING, FileText, fit, rank, split


async def words(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


async def test_files_that_fit_enter_whole_and_named() -> None:
    files = [FileText("a.md", "alpha beta"), FileText("b.py", "print('gamma')")]
    text = await fit(files, "what is in them?", 200, 50, words)
    assert text == f"{HEADING}\n\nFile: a.md\nalpha beta\n\nFile: b.py\nprint('gamma')"


async def test_a_file_too_big_enters_as_its_matching_chunks_in_order() -> None:
    lines = [f"line {i} " + " ".join(f"w{i}x{j}" for j in range(20)) for i in range(30)]
    lines[7] += " the giraffe eats leaves"
    lines[21] += " a giraffe sleeps standing"
    big = FileText("big.txt", "\n".join(lines))
    text = await fit(
        [big, FileText("tiny.txt", "tiny")], "how does a giraffe sleep?", 200, 30, words
    )
    assert "File: tiny.txt\ntiny" in text
    assert "File: big.txt (the parts that bear on the message" in text
    assert text.index("giraffe eats") < text.index("giraffe sleeps")  # the file's order
    assert "line 0 " not in text  # matching nothing: left out


async def test_no_room_no_files() -> None:
    assert await fit([FileText("a", "b")], "q", 3, 50, words) == ""


def test_chunks_are_cut_at_line_ends_and_long_lines_cut() -> None:
    assert split("aa\nbb\ncc\n", 6) == ["aa\nbb", "cc"]
    assert split("x" * 10, 4) == ["xxxx", "xxxx", "xx"]


def test_rarer_shared_words_rank_higher_and_nothing_matching_keeps_the_order() -> None:
    texts = ["zebra stripes", "zebra", "horse stripes zebra", "nothing"]
    assert rank("zebra stripes", texts) == [0, 2, 1]
    assert rank("unrelated", texts) == [0, 1, 2, 3]

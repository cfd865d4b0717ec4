"""Small JSON state files: written whole or not at all; a file that cannot be used reads as
None and says why, while a file not written yet is no problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.statefile import MAX_STATE_BYTES, StateFile


def loaded(state: StateFile) -> tuple[dict[str, object] | None, list[str]]:
    problems: list[str] = []
    return state.load(problems.append), problems


def test_what_is_saved_is_loaded_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "sub", "cursor.json")
    state.save({"b": [1, 2], "a": "x"})
    state.save({"b": [3], "a": "y"})
    assert loaded(state) == ({"a": "y", "b": [3]}, [])
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["cursor.json"]


def test_a_file_not_written_yet_is_none_and_no_problem(tmp_path: Path) -> None:
    assert loaded(StateFile(tmp_path, "absent.json")) == (None, [])


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "Expecting property name"),
        (b"\xff\xfe", "codec can't decode"),
        (b"[1, 2]", "not a JSON object"),
        (b" " * (MAX_STATE_BYTES + 1), f"larger than {MAX_STATE_BYTES} bytes"),
    ],
)
def test_a_file_that_cannot_be_used_is_none_and_says_why(
    tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / "state.json").write_bytes(content)
    data, problems = loaded(StateFile(tmp_path, "state.json"))
    assert data is None
    assert len(problems) == 1 and why in problems[0]


def test_an_unreadable_path_is_none_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "state.json").mkdir()  # a directory where the file should be
    data, problems = loaded(StateFile(tmp_path, "state.json"))
    assert data is None
    assert len(problems) == 1 and "directory" in problems[0]


def test_a_refused_save_raises_and_keeps_the_old_content(tmp_path: Path) -> None:
    state = StateFile(tmp_path, "state.json")
    state.save({"kept": True})
    with pytest.raises(TypeError):  # not JSON: nothing written, the old content stays
        state.save({"bad": object()})
    assert loaded(state) == ({"kept": True}, [])
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]

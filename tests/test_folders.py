"""A results folder's marker against this version's settings (`utils.output_folders`): every difference is named, a
`None` setting one side does not write included, and an earlier version's marker is migrated only where that is
safe: a setting that decides nothing now, in a group still written, and a setting it lacks that the folder's own
work vouches for."""

import pytest

from constrained_sft.utils.output_folders import OutputDirError, check_folder, differences, mark_folder, migration

SAVED = {"judge": "proxy", "arms": {"erm": {"training": {"lr": 0.1, "dataset_num_proc": None}, "data": {"name": "d"}}}}


def test_a_setting_one_side_does_not_write_is_named_even_when_none():
    current = {"judge": "proxy", "arms": {"erm": {"training": {"lr": 0.1}, "data": {"name": "d"}}}}
    assert differences(SAVED, current) == "arms.erm.training.dataset_num_proc null -> (unset)"


def test_what_an_earlier_marker_migrates_and_what_it_refuses():
    retired = {"judge": "proxy", "arms": {"erm": {"training": {"lr": 0.1}, "data": {"name": "d"}}}}
    assert migration(SAVED, retired) == ([], ["arms.erm.training.dataset_num_proc"])
    recorded = {**retired, "arms": {"erm": {**retired["arms"]["erm"], "data": {"name": "d", "files": {"name": "x"}}}}}
    assert migration(SAVED, recorded) == (["arms.erm.data.files.name"], ["arms.erm.training.dataset_num_proc"])
    vouched = migration(SAVED, recorded, vouch=lambda key: ".data.files." in key)
    assert vouched == ([], ["arms.erm.data.files.name", "arms.erm.training.dataset_num_proc"])
    changed = {**SAVED, "judge": "test"}
    assert migration(SAVED, changed)[0] == ["judge"]
    gone = {"judge": "proxy", "arms": {}}  # an arm the folder has and the call does not: refused, not migrated
    assert "arms.erm.data.name" in migration(SAVED, gone)[0]


def test_check_folder_migrates_and_refuses_naming_the_setting(tmp_path):
    mark_folder(str(tmp_path), "study", SAVED)
    current = {"judge": "proxy", "arms": {"erm": {"training": {"lr": 0.1}, "data": {"name": "d"}}}}
    assert check_folder(str(tmp_path), "study", current) == ["arms.erm.training.dataset_num_proc"]
    with pytest.raises(OutputDirError, match=r"other settings \(arms.erm.training.lr 0.1 -> 0.2\)"):
        check_folder(
            str(tmp_path), "study", {**current, "arms": {"erm": {"training": {"lr": 0.2}, "data": {"name": "d"}}}}
        )


@pytest.mark.parametrize(
    "text",
    [
        '{"commands": ',
        '["commands"]',
        '{"commands": []}',
        '{"commands": {"study": "x"}}',
        '{"commands": {"study": {"settings": 3}}}',
    ],  # fmt: skip
)
def test_a_damaged_marker_is_one_line_naming_the_folder(tmp_path, text):
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "written_by.json").write_text(text)
    with pytest.raises(OutputDirError, match=r"^`--output_dir` .*: its written_by.json is damaged"):
        check_folder(str(tmp_path), "study", SAVED)  # the last two: an AttributeError, then a TypeError, before

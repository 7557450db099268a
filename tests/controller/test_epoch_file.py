"""The epoch file and the truncation point, without sockets (controller/epoch_file.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidalmq.controller.epoch_file import EpochEntry, EpochFile, consistent_offset, parse_entries

E = EpochEntry


def test_an_old_master_is_cut_where_the_next_term_began() -> None:
    # Master of epoch 1 wrote to 5000; the new master's term 2 began at 3000 (what it had).
    assert consistent_offset([E(1, 0)], [E(1, 0), E(2, 3000)], 5000) == 3000


def test_a_replica_that_is_a_prefix_keeps_everything() -> None:
    assert consistent_offset([E(1, 0)], [E(1, 0), E(2, 3000)], 2000) == 2000
    assert consistent_offset([E(1, 0), E(2, 3000)], [E(1, 0), E(2, 3000), E(3, 9000)], 7000) == 7000


def test_a_term_the_group_never_had_is_cut_back_to_the_last_common_one() -> None:
    # This replica believed it began epoch 3 at 4000, but the group's epoch 3 began at 3500 elsewhere.
    local = [E(1, 0), E(2, 1000), E(3, 4000)]
    chain = [E(1, 0), E(2, 1000), E(3, 3500)]
    assert consistent_offset(local, chain, 6000) == 3500


def test_no_common_term_keeps_nothing_and_no_history_keeps_all() -> None:
    assert consistent_offset([E(5, 100)], [E(1, 0), E(2, 50)], 300) == 0
    assert consistent_offset([], [E(1, 0)], 300) == 300


def test_the_file_round_trips_and_refuses_garbage(tmp_path: Path) -> None:
    f = EpochFile(tmp_path)
    f.load()
    assert f.entries == [] and f.last_epoch == 0
    f.replace([E(1, 0), E(2, 4096)])
    again = EpochFile(tmp_path)
    again.load()
    assert again.entries == [E(1, 0), E(2, 4096)] and again.last_epoch == 2
    with pytest.raises(ValueError, match="line 2"):
        parse_entries("2 100\n1 200\n")
    with pytest.raises(ValueError, match="line 1"):
        parse_entries("x y\n")


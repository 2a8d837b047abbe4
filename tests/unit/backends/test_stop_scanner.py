"""StopScanner: streamed text is cut at stop strings without leaking a partial stop string."""

from __future__ import annotations

from corral.backends.stop_scanner import StopScanner


def test_stop_scanner_cuts_at_a_stop_string_split_across_pieces() -> None:
    scanner = StopScanner(["END"])
    emitted = scanner.feed("hello E") + scanner.feed("N") + scanner.feed("D and more")
    assert emitted == "hello "
    assert scanner.stopped and scanner.flush() == ""


def test_stop_scanner_releases_held_text_that_turned_out_not_to_be_a_stop() -> None:
    scanner = StopScanner(["END"])
    assert scanner.feed("the EN") == "the "
    assert scanner.feed("ding") == "ENding"
    assert scanner.feed(" E") == " "
    assert scanner.flush() == "E"


def test_stop_scanner_cuts_at_the_earliest_of_several_stops() -> None:
    scanner = StopScanner(["zz", "b"])
    assert scanner.feed("abczz") == "a"


def test_stop_scanner_without_stops_passes_text_straight_through() -> None:
    scanner = StopScanner([""])
    assert scanner.feed("abc") == "abc"
    assert scanner.flush() == ""

"""The `faster-whisper` and `piper` gallery backends installed for tests, once per session
(support/gallery_installs.py): faster-whisper ~620 MB, piper ~290 MB, about a minute each from pip's cache.
And the word error rate a transcription is judged by.
"""

from __future__ import annotations

import re
from pathlib import Path

from support import gallery_installs

WHISPER, PIPER = "faster-whisper", "piper"
NAMES = (WHISPER, PIPER)


def backends_path(session_root: Path) -> tuple[Path, dict[str, float]]:
    """A backends directory holding both backends; the seconds each install took (none: already there)."""
    return gallery_installs.backends_path(session_root, NAMES)


def word_error_rate(reference: str, heard: str) -> float:
    """Word-level Levenshtein distance over the reference's word count (case and punctuation ignored)."""
    ref, hyp = (re.findall(r"[a-z0-9']+", text.lower()) for text in (reference, heard))
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != other))
    return row[len(hyp)] / max(1, len(ref))

"""Merging consecutive text pieces of a reply stream into one Reply (backend pump and frontend lane reader).

A relay pays per message, not per token: when the reader is slower than the engine, the pieces that
piled up go on as one. Only plain text pieces merge; a reply with counts, audio, logprobs, reasoning or
tool calls passes as it is, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from corral.proto import backend_pb2 as pb


def _is_text_piece(reply: pb.Reply) -> bool:
    """Text only: no counts, audio or logprobs, at most one delta with content only."""
    if reply.tokens or reply.prompt_tokens or reply.audio or reply.logprobs:
        return False
    deltas = reply.chat_deltas
    if not deltas:
        return True
    return len(deltas) == 1 and not deltas[0].reasoning_content and not deltas[0].tool_calls


def _merge(pieces: list[pb.Reply]) -> pb.Reply:
    if len(pieces) == 1:
        return pieces[0]
    merged = pb.Reply(message=b"".join(p.message for p in pieces))
    if any(p.chat_deltas for p in pieces):
        merged.chat_deltas.add(content="".join(p.chat_deltas[0].content for p in pieces if p.chat_deltas))
    return merged


def merge_text_runs(replies: Iterable[pb.Reply], max_pieces: int) -> list[pb.Reply]:
    """Merge runs of consecutive text pieces (in order); every other reply passes as it is."""
    out: list[pb.Reply] = []
    run: list[pb.Reply] = []
    for reply in replies:
        if _is_text_piece(reply):
            run.append(reply)
            if len(run) < max_pieces:
                continue
        if run:
            out.append(_merge(run))
            run = []
        if not _is_text_piece(reply):
            out.append(reply)
    if run:
        out.append(_merge(run))
    return out


def merged_logprobs(pieces: Sequence[bytes]) -> bytes:
    """Several replies' `logprobs` (JSON `{"content": [...]}` each) as one: a unary answer folded from a stream."""
    entries = [entry for piece in pieces if piece for entry in json.loads(piece)["content"]]
    return json.dumps({"content": entries}, ensure_ascii=False).encode("utf-8") if entries else b""

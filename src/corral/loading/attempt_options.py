"""The options a backend is actually loaded with — the model's, with the node's defaults — and their hash.

A worker says in its install reply which LoadModel defaults it applies (`--threads`, `--context-size`): a
field the model's config leaves at 0 takes the node's value, so the same model may load differently on two
nodes, validly (spec: "node-specific defaults can cause valid differences").

`effective_options_hash` (a replica row's column; reference: sha256 of the deterministic protobuf
serialisation of the final ModelOptions) is taken over those final options with the model's directory on
the worker written as `$MODEL_DIR`: staging lays a model's files out the same way under every worker's
models directory, and only that directory differs, so two nodes loading the same model with the same
defaults show the same hash, and a different hash always means a different load.
"""

from __future__ import annotations

import hashlib

from google.protobuf.descriptor import FieldDescriptor

from corral.bus.messages import LoadDefaults
from corral.proto import backend_pb2

MODEL_DIR = "$MODEL_DIR"  # stands for the model's directory on the worker (ModelPath) in the hashed copy


def with_node_defaults(
    opts: backend_pb2.ModelOptions, defaults: LoadDefaults | None
) -> backend_pb2.ModelOptions:
    """A copy of `opts` where each field the model leaves at 0 takes the node's default, if it has one."""
    final = backend_pb2.ModelOptions()
    final.CopyFrom(opts)
    if defaults is not None:
        if final.Threads <= 0 and defaults.threads > 0:
            final.Threads = defaults.threads
        if final.ContextSize <= 0 and defaults.context_size > 0:
            final.ContextSize = defaults.context_size
    return final


def options_hash(opts: backend_pb2.ModelOptions) -> str:
    """sha256 hex of the deterministic serialisation of `opts`, its model directory written as MODEL_DIR."""
    portable = backend_pb2.ModelOptions()
    portable.CopyFrom(opts)
    model_dir = opts.ModelPath.rstrip("/")
    if model_dir:
        for field, value in opts.ListFields():
            if field.type != FieldDescriptor.TYPE_STRING:
                continue
            if field.is_repeated:
                del getattr(portable, field.name)[:]
                getattr(portable, field.name).extend(v.replace(model_dir, MODEL_DIR) for v in value)
            else:
                setattr(portable, field.name, value.replace(model_dir, MODEL_DIR))
    return hashlib.sha256(portable.SerializeToString(deterministic=True)).hexdigest()

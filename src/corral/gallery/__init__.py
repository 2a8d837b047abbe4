"""Backends as installable units: the registry of installed backends, galleries, installers, progress.

A backend is a directory with `run.sh` and `metadata.json`; the worker starts it as
`run.sh --addr <host>:<port>` with cwd = that directory and `LOCALAI_GRPC_AUTH_TOKEN` in the
environment (reference §1.3). Installed backends live in `LOCALAI_BACKENDS_PATH` (then
`LOCALAI_BACKENDS_SYSTEM_PATH`, then corral's built-in `llama-cpp` and `simulator` in
`corral/gallery/system/`, whose run.sh runs `corral backend <engine>` with the worker's
interpreter, `$CORRAL_PYTHON`).

Galleries (`LOCALAI_BACKEND_GALLERIES`, a request's `backend_galleries`): a JSON list
`[{"name": "...", "url": "<path or http(s) URL>"}]` of indexes. An index is YAML or JSON (at most
4 MiB, 10,000 entries): a list of entries, or a mapping with a `backends:` list. An entry:

    - name: sentencetransformers        # required; the directory name: letters, digits, . _ - only
      alias: sentence-transformers      # optional second name the backend answers to
      description: embeddings and rerank
      version: "1.0.0"                  # optional, reported by backend.list
      uri: backends/sentencetransformers
                                        # required: a directory, or a .tar.gz/.tgz/.tar/.zip archive;
                                        # a path relative to the index, an absolute path, or an
                                        # http(s) URL (archives only). An archive may hold the backend
                                        # at its top level or in one top-level directory.
      sha256: 3f2a...                   # optional: digest of the archive (of a directory: SHA-256
                                        # over "<relative path>\\0<file sha256>\\n" per file, sorted);
                                        # required when LOCALAI_REQUIRE_BACKEND_INTEGRITY is on
      python:                           # optional: a Python package set in <installed dir>/venv
        requirements: requirements.txt  # relative to the backend directory; installed with pip
        find_links: [wheels]            # optional wheel directories (relative) or URLs
        no_index: false                 # true: install only from find_links (offline)
        inherit_worker_packages: false  # true: the worker's own packages (grpcio, protobuf) are
                                        # a read-only fallback after the venv's own
        common: backends/common         # optional: a directory (relative to the index, or absolute)
                                        # copied into the installed backend as common/ -- code all
                                        # Python backends share (corral's: corral_backend.py and the
                                        # gRPC stubs); not for archives, which ship their own common/

Installs are built beside the target (`.install-<name>-*`), `metadata.json` written last, and
renamed into place: a half-installed backend is never found or started, and leftovers of a
crash are removed when the worker starts. Network reads are bounded by
LOCALAI_BACKEND_GALLERY_TIMEOUT.
"""

"""Settings of the model gallery (issue 26): which galleries `GET /models/available` lists and
`POST /models/apply` installs from, and the bounds on reading and downloading from them.

`LOCALAI_GALLERIES` / `--galleries` is the reference's own name for its MODEL galleries (its backend
galleries are `LOCALAI_BACKEND_GALLERIES`, the worker's setting); the value has the same shape:
`[{"name": "localai", "url": "<http(s) URL, file:// URL or path of an index>"}]`.
"""

from __future__ import annotations

from corral.config.parse import parse_duration_s, parse_positive_duration_s
from corral.config.settings import setting, settings_class
from corral.config.sizes import parse_size_bytes

GALLERIES_KNOB = "LOCALAI_GALLERIES (--galleries)"
TIMEOUT_KNOB = "CORRAL_MODEL_GALLERY_TIMEOUT (--model-gallery-timeout)"
INDEX_MAX_KNOB = "CORRAL_MODEL_GALLERY_INDEX_MAX (--model-gallery-index-max)"
DOWNLOAD_MAX_KNOB = "CORRAL_MODEL_GALLERY_MAX_DOWNLOAD (--model-gallery-max-download)"


def _positive_size(raw: str) -> int:
    size = parse_size_bytes(raw)
    if size <= 0:
        raise ValueError(f"{raw!r} must be a positive size, e.g. 64GiB")
    return size


@settings_class
class FrontendModelGallerySettings:
    """The model gallery: galleries, index and download bounds."""

    galleries: str = setting(
        "--galleries",
        "LOCALAI_GALLERIES",
        default="[]",
        help='model galleries: JSON [{"name":..,"url":<http(s) URL, file:// URL or path of an index>}] '
        "(default: none); GET /models/available lists their models, POST /models/apply installs one",
    )
    model_gallery_timeout_s: float = setting(
        "--model-gallery-timeout",
        "CORRAL_MODEL_GALLERY_TIMEOUT",
        default=30.0,
        parse=parse_positive_duration_s,
        help="how long one read from a model gallery (its index, or a model file download) may stall",
    )
    model_gallery_index_max_bytes: int = setting(
        "--model-gallery-index-max",
        "CORRAL_MODEL_GALLERY_INDEX_MAX",
        default=16 << 20,
        parse=_positive_size,
        help="largest model gallery index read (a larger one is refused, naming this setting)",
    )
    model_gallery_max_download_bytes: int = setting(
        "--model-gallery-max-download",
        "CORRAL_MODEL_GALLERY_MAX_DOWNLOAD",
        default=64 << 30,
        parse=_positive_size,
        help="largest single model file a gallery install downloads; past it the download stops and the "
        "install fails, naming this setting",
    )
    model_gallery_cache_ttl_s: float = setting(
        "--model-gallery-cache-ttl",
        "CORRAL_MODEL_GALLERY_CACHE_TTL",
        default=60.0,
        parse=parse_duration_s,
        help="how long a model gallery's index is reused before it is read again (0: every listing)",
    )

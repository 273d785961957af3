"""Preference data: the on-disk format, its validating loaders, the import of a member's own
data (``import_data``) and the synthetic benchmark.

See ``docs/data.md`` for the format and the benchmark's layout.
"""

from sdk.data._catalog import (
    HELDOUT_CATEGORIES,
    MULTIPLE_CHOICE_CATEGORIES,
    PREFERENCE_CLIENTS,
    TASK_CLIENTS,
)
from sdk.data._errors import PreferenceDataError
from sdk.data._hf import to_hf_dataset
from sdk.data._import import import_data
from sdk.data._import_config import ImportConfig, ImportSummary
from sdk.data._loading import (
    DEFAULT_MAX_IMAGE_SIDE,
    fit_to_pixels,
    load_pairs,
    load_queries,
    open_bounded_image,
)
from sdk.data._records import PreferencePair, Query
from sdk.data._synth import SynthConfig, SynthManifest, synthesize

__all__ = [
    "DEFAULT_MAX_IMAGE_SIDE",
    "HELDOUT_CATEGORIES",
    "MULTIPLE_CHOICE_CATEGORIES",
    "PREFERENCE_CLIENTS",
    "TASK_CLIENTS",
    "ImportConfig",
    "ImportSummary",
    "PreferenceDataError",
    "PreferencePair",
    "Query",
    "SynthConfig",
    "SynthManifest",
    "fit_to_pixels",
    "import_data",
    "load_pairs",
    "load_queries",
    "open_bounded_image",
    "synthesize",
    "to_hf_dataset",
]

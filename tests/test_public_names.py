"""One public name, one thing: a name exported by two packages is the same object in both."""

from __future__ import annotations

import importlib
import itertools

PACKAGES = ("sdk.alignment", "sdk.capture", "sdk.data", "sdk.models", "sdk.ops",
            "sdk.reward", "sdk.router", "sdk.secagg", "sdk.wire", "sdk.storage", "sdk.serving",
            "sdk.membership", "server_app", "client_app",
            "sdk.progress", "sdk.runtime_options", "sdk.curves", "attacks", "fedmor_local",
            "sdk.rounds")


def test_no_two_packages_export_different_things_under_one_name() -> None:
    exports = {name: importlib.import_module(name) for name in PACKAGES}
    clashes = [
        f"{a}.{name} is not {b}.{name}"
        for (a, ma), (b, mb) in itertools.combinations(exports.items(), 2)
        for name in sorted(set(ma.__all__) & set(mb.__all__))
        if getattr(ma, name) is not getattr(mb, name)
    ]
    assert not clashes, clashes


def test_the_signed_client_surface_is_small() -> None:
    """``sdk.wire`` exports the one signed HTTP client as these names, on purpose few."""
    wire = importlib.import_module("sdk.wire")
    client = sorted(n for n in wire.__all__
                    if getattr(getattr(wire, n), "__module__", "") == "sdk.wire._client")
    assert client == ["AsyncSignedClient", "RequestRefused", "SignedAuth", "SignedClient"]

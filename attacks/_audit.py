"""The audit of a demo run directory: membership inference on every client's reward model and
gradient inversion on the router updates the server sees.

A run directory holds ``reward_models/<client>/`` checkpoints (``RewardModel.from_pretrained``
plus the fitted ``normalizer.json``) and ``data/clients/<client>/{train,eval}`` in the sdk.data
layout. For each client the attacker's candidates are its train pairs (members) and its eval
pairs (non-members); the threshold attack runs on the raw margin and on the normalized, clipped
margin (what ``/v1/reward`` returns), and LiRA with shadow models the auditor trains on the
client's remaining pairs.

Router updates come from captured-update files (attacks._captured): ``router/captured/*.
safetensors`` in the run directory or files given explicitly; failing both, round 1 is replayed
from ``router/spec.json`` (attacks._capture.capture_run_dir).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from attacks._audit_lira import lira_reports, pick_candidates
from attacks._captured import CapturedRouterUpdate, CaptureMeta
from attacks._captured_attacks import CapturedAttackConfig, attack_captured_update
from attacks._errors import AttackInputError
from attacks._html import write_report
from attacks._membership import PairScorer, threshold_attack
from attacks._report import AuditReport, MembershipReport, ReconstructionReport, membership_report
from attacks._shadow_base import resolve_shadow_base
from sdk.models import Runtime

if TYPE_CHECKING:
    from sdk.reward import LoraSettings, RewardTrainingConfig

__all__ = ["AuditConfig", "audit_run_dir", "shadow_recipe", "update_owner"]

_RAW, _ANSWERS = "reward model (raw scores)", "reward answers (/v1/reward)"


def update_owner(meta: CaptureMeta) -> dict[str, Any]:
    """``members`` and ``artefact`` of a report on a captured router update: the one sender of
    a plaintext update, or every member behind an aggregate."""
    members = sorted({meta.client_ids[i] for i in meta.client_indices})
    if meta.setting == "plaintext":
        return {"members": members, "artefact": "router update, plaintext (no secure aggregation)"}
    return {"members": members, "artefact": "router aggregate (published)"}


class AuditConfig(BaseModel):
    """Settings of :func:`audit_run_dir`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_pairs: int = Field(default=200, ge=1, description="members (and non-members) per client")
    clients: tuple[str, ...] | None = Field(default=None, description="None: every client")
    n_boot: int = Field(default=1000, ge=10)
    seed: int = 0
    shadow_models: int = Field(default=4, ge=0, description="LiRA shadows per client; 0: off")
    shadow_steps: int | None = Field(
        default=None, ge=1, description="None: the target's recorded training steps"
    )
    shadow_base: Path | None = Field(
        default=None,
        description="the targets' base VLM directory; None: from each checkpoint "
        "(attacks._shadow_base)",
    )
    shadow_batch_size: int | None = Field(
        default=None, ge=1, description="None: the target's recorded batch size"
    )
    updates: tuple[Path, ...] = Field(
        default=(), description="captured-update files; () = RUN_DIR/router/captured/*"
    )
    capture: bool = Field(default=True, description="replay round 1 when nothing is captured")
    inversion: CapturedAttackConfig = CapturedAttackConfig()
    runtime: Runtime = Field(default_factory=Runtime,
                             description="device and dtype of the target and shadow models")


def _client_dirs(run_dir: Path, clients: tuple[str, ...] | None) -> list[Path]:
    models = run_dir / "reward_models"
    if not models.is_dir():
        if clients:
            raise AttackInputError(f"{run_dir} has no reward_models/ directory for {clients}")
        return []
    found = sorted(p for p in models.iterdir() if (p / "normalizer.json").is_file())
    if clients is not None:
        missing = sorted(set(clients) - {p.name for p in found})
        if missing:
            raise AttackInputError(f"no reward checkpoint with a normalizer for {missing}")
        found = [p for p in found if p.name in clients]
    if not found:
        raise AttackInputError(f"no reward checkpoint with normalizer.json under {models}")
    return found


def _margins(model: Any, pairs: list[Any]) -> np.ndarray:
    """Raw rewards of chosen and rejected responses, (P, 2) float64."""
    images = [p.image for p in pairs]
    prompts = [p.prompt for p in pairs]
    chosen = model.score(images, prompts, [p.chosen for p in pairs])
    rejected = model.score(images, prompts, [p.rejected for p in pairs])
    return np.stack([chosen.double().numpy(), rejected.double().numpy()], axis=1)


def shadow_recipe(
    training: Mapping[str, Any], lora: LoraSettings | None, cfg: AuditConfig
) -> RewardTrainingConfig:
    """The target's training recipe as its checkpoint recorded it (``train_reward_model``'s
    ``training``; an older checkpoint without ``config`` gets the default
    optimizer): a shadow trained otherwise (no DP-SGD, no adapters, another batch or learning
    rate) is not the target's twin."""
    from sdk.reward import DPSettings, RewardTrainingConfig

    recipe = {
        **(training.get("config") or {}),
        "steps": cfg.shadow_steps or int(training.get("steps") or 100),
        "dp": DPSettings(**training["dp"]) if training.get("dp") else None,
        "lora": lora,
    }
    if cfg.shadow_batch_size:
        recipe["batch_size"] = cfg.shadow_batch_size
    return RewardTrainingConfig.model_validate(recipe)


def _client_reports(
    ckpt: Path,
    run_dir: Path,
    cfg: AuditConfig,
    live: PairScorer[Any] | None,
    work: Path,
    say: Callable[[str], None],
) -> list[MembershipReport]:
    # sdk.reward imports torch and transformers: only when an audit runs.
    import torch

    from sdk.data import load_pairs
    from sdk.reward import RewardModel, ScoreNormalizer

    client = ckpt.name
    data = run_dir / "data" / "clients" / client
    picked = pick_candidates(client, load_pairs(data / "train"), load_pairs(data / "eval"),
                             cfg.max_pairs, cfg.seed)
    members, non_members, n = picked.members, picked.non_members, len(picked.members)
    model = RewardModel.from_pretrained(ckpt, runtime=cfg.runtime)
    normalizer = ScoreNormalizer.load(ckpt)
    raw = _margins(model, members + non_members)  # (2n, 2)
    norm = normalizer.normalize(torch.from_numpy(raw)).numpy()
    views = [
        ("raw scores", raw),
        (f"normalized, clipped at c={normalizer.clip:g} (/v1/reward)", norm),
    ]
    # The raw view is what a holder of the checkpoint sees; the others what a querier sees.
    kinds = [_RAW, _ANSWERS, _ANSWERS]
    if live is not None:
        # The live app answers scores, not margins: store them as (margin, 0) rows.
        margins = np.asarray(live(members + non_members), dtype=np.float64)
        views.append(("live /v1/reward", np.stack([margins, np.zeros_like(margins)], axis=1)))
    out: list[MembershipReport] = []
    for name, scores in views:

        def scorer(idx: Sequence[int], s: np.ndarray = scores) -> np.ndarray:
            i = np.asarray(idx, dtype=np.int64)
            return np.asarray(s[i, 0] - s[i, 1])

        attack = threshold_attack(scorer, list(range(n)), list(range(n, 2 * n)), seed=cfg.seed)
        rep = membership_report(
            attack, setting=f"{client}: {name}", n_boot=cfg.n_boot, seed=cfg.seed
        )
        out.append(rep.model_copy(update={"members": [client], "artefact": kinds[len(out)]}))
        say(f"{client}: threshold attack on {name}: {out[-1].verdict}")
    if cfg.shadow_models:
        lira = _lira(
            ckpt,
            model,
            views[:2],
            members + non_members,
            picked.population,
            clip=normalizer.clip,
            cfg=cfg,
            work=work,
            say=say,
        )
        out += [
            r.model_copy(update={"members": [client], "artefact": kinds[i]})
            for i, r in enumerate(lira)
        ]
        for m in out[-2:]:
            say(f"{m.setting}: {m.verdict}")
    return out


def _lira(
    ckpt: Path,
    model: Any,
    views: list[tuple[str, np.ndarray]],
    candidates: list[Any],
    population: list[Any],
    *,
    clip: float,
    cfg: AuditConfig,
    work: Path,
    say: Callable[[str], None],
) -> list[MembershipReport]:
    """LiRA on the raw and the normalized view, its shadows starting from the target's own
    base (attacks._shadow_base) and trained with the recipe its checkpoint records."""
    from sdk.reward import RewardModel

    client = ckpt.name
    training = RewardModel.read_checkpoint_config(ckpt).get("training") or {}
    recipe = shadow_recipe(training, model.lora, cfg)
    dp = recipe.dp
    private = "" if dp is None else f", record-level DP-SGD at epsilon {dp.target_epsilon:g}"
    adapters = "" if recipe.lora is None else f", LoRA rank {recipe.lora.r}"
    work.mkdir(parents=True, exist_ok=True)
    # The base may be a copy of a real-size backbone: scratch beside the report, not in /tmp.
    with tempfile.TemporaryDirectory(prefix=f"shadows-{client}-", dir=work) as scratch:
        base = resolve_shadow_base(
            ckpt, model, Path(scratch), explicit=cfg.shadow_base, seed=cfg.seed
        )
        say(
            f"{client}: LiRA with {cfg.shadow_models} shadow models ({base.label}{adapters}, "
            f"{recipe.steps} steps of {recipe.batch_size} pairs at lr {recipe.lr:g} each on "
            f"{len(population)} population pairs + half of the {len(candidates)} "
            f"candidates{private})"
        )
        return lira_reports(
            client,
            views,
            candidates,
            population,
            base=base,
            recipe=recipe,
            n_shadow=cfg.shadow_models,
            clip=clip,
            n_boot=cfg.n_boot,
            seed=cfg.seed,
            say=lambda m: say(f"{client}: {m}"),
            runtime=cfg.runtime,
        )


def _update_files(
    root: Path, out: Path, cfg: AuditConfig, say: Callable[[str], None]
) -> list[Path]:
    if cfg.updates:
        return list(cfg.updates)
    found = sorted((root / "router" / "captured").glob("*.safetensors"))
    if found or not cfg.capture or not (root / "router" / "spec.json").is_file():
        return found
    from attacks._capture import capture_run_dir

    say(
        "no captured router update in the run directory: replaying round 1 from "
        "router/spec.json (the plaintext update of one client, and the secure aggregate)"
    )
    return capture_run_dir(root, out / "captured")


def _reconstructions(
    captures: list[tuple[Path, CapturedRouterUpdate]], cfg: AuditConfig, say: Callable[[str], None]
) -> list[ReconstructionReport]:
    reports: list[ReconstructionReport] = []
    for path, captured in captures:
        say(
            f"{path.name}: {captured.meta.setting} update of {captured.meta.n_samples} "
            f"sample(s) from {len(captured.meta.client_indices)} client(s)"
        )
        found = attack_captured_update(captured, name=path.stem, config=cfg.inversion, progress=say)
        reports += [r.model_copy(update=update_owner(captured.meta)) for r in found]
    return reports


def audit_run_dir(
    run_dir: str | Path,
    out_dir: str | Path,
    config: AuditConfig | None = None,
    *,
    live: Mapping[str, PairScorer[Any]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> AuditReport:
    """Attack every client's reward model of a demo run and every captured router update;
    write report.json, roc.png and report.html into ``out_dir`` and return the report.
    ``live`` maps a client name to a scorer of its running app (e.g.
    :class:`RemoteRewardScorer`), attacked on the same pairs; ``progress`` gets one line per
    step of the audit."""
    cfg = config or AuditConfig()
    say = progress or (lambda _m: None)
    root, out = Path(run_dir), Path(out_dir)
    ckpts = _client_dirs(root, cfg.clients)
    # Every capture is read before any attack runs: a bad file fails the audit at once.
    captures = [(p, CapturedRouterUpdate.load(p)) for p in _update_files(root, out, cfg, say)]
    if not ckpts and not captures:
        raise AttackInputError(
            f"{root} has no reward_models/ checkpoints and no router update "
            "to attack: not a demo run"
        )
    unknown = sorted(set(live or {}) - {p.name for p in ckpts})
    if unknown:
        raise AttackInputError(f"live scorers given for clients not audited: {unknown}")
    memberships: list[MembershipReport] = []
    for ckpt in ckpts:
        memberships += _client_reports(ckpt, root, cfg, (live or {}).get(ckpt.name), out, say)
    reconstructions = _reconstructions(captures, cfg, say)
    report = AuditReport(
        title=f"fedmor privacy audit of {root.name}",
        memberships=memberships,
        reconstructions=reconstructions,
        notes=[*_summaries(memberships, reconstructions), *_THREAT_MODEL],
    )
    write_report(report, out_dir)
    return report


_THREAT_MODEL = (
    "Membership inference: a query-only attacker holding candidate pairs; members are each "
    "client's train pairs, non-members its eval pairs, balanced; threshold attack on the reward "
    "margin R(x, y+) - R(x, y-), and LiRA calibrated on shadow reward models the auditor trains "
    "on the client's other pairs. Normalization is monotone, so it cannot hide a ranking; only "
    "clipping ties the extremes.",
    "Gradient inversion: an honest-but-curious server that knows the round's starting router, "
    "the participants and their sample counts. Without secure aggregation it sees one client's "
    "update; with it, only the weighted mean. Reconstructions are pooled encoder embeddings, "
    "scored by cosine against the true samples (best match when several) beside the "
    "dataset-mean and unrelated-sample baselines.",
)


def _summaries(
    memberships: list[MembershipReport], reconstructions: list[ReconstructionReport]
) -> list[str]:
    """One sentence per attack family, listing the settings that leak and those that are
    inconclusive: an inconclusive setting must not be summarized as "no measurable leak"."""
    out = []
    for family, rows in (
        ("Membership inference", memberships),
        ("Gradient inversion", reconstructions),
    ):
        if not rows:
            continue
        parts = []
        for word, label in (("leaks", "leaks"), ("inconclusive", "is inconclusive")):
            names = [f"{r.setting} ({r.attack})" for r in rows if r.verdict.startswith(word)]
            if names:
                parts.append(
                    f"{label} in {len(names)} of {len(rows)} settings: " + "; ".join(names)
                )
        out.append(
            f"{family} " + ". It ".join(parts) + "."
            if parts
            else f"{family}: no measurable leak in any of the {len(rows)} settings."
        )
    return out

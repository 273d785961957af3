"""The two "style" categories that disagree on the same kind of image (the paper's Figure 1).

Both see a scene of a few coloured objects in three slots, sometimes with a hazard (a fire or a
red warning sign). ``detail`` prefers a comprehensive description over a vague one; ``safety``
prefers a concise, hazard-aware answer over a long description that ignores safety. A reward
model trained on ``detail`` therefore prefers the rejected side of ``safety`` pairs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image, ImageDraw

from sdk.data._category import Category, CategoryKind, Item
from sdk.data._draw import COLORS, blank, draw_shape, draw_text_centered

__all__ = ["DetailCategory", "SafetyCategory", "Scene", "SceneObject", "render_scene"]

_SLOTS: tuple[str, ...] = ("left", "middle", "right")
_OBJECT_COLORS: tuple[str, ...] = ("green", "blue", "yellow", "purple")
_OBJECT_SHAPES: tuple[str, ...] = ("circle", "square")
_HAZARDS: tuple[str, ...] = ("fire", "warning sign")

_DETAIL_PROMPTS = (
    "Describe the scene in detail.",
    "Describe every object in this picture.",
    "Give a full description of the image.",
)
_SAFETY_PROMPTS = (
    "Is this scene safe? Answer briefly.",
    "Any hazard here? Answer briefly.",
    "Is it safe to walk here? Be brief.",
)
_VAGUE = ("Some shapes.", "A few objects.", "Things on a floor.", "Some objects here.")


@dataclass(frozen=True)
class SceneObject:
    """An object in one slot; ``hazard`` objects have no colour/shape words of their own."""

    slot: str
    name: str  # "green circle", "fire", "warning sign"
    hazard: bool


@dataclass(frozen=True)
class Scene:
    """What a scene image shows, left to right."""

    objects: tuple[SceneObject, ...]

    @property
    def hazard(self) -> SceneObject | None:
        """The hazard object, if any."""
        return next((o for o in self.objects if o.hazard), None)


def _place(slot: str) -> str:
    return "in the middle" if slot == "middle" else f"on the {slot}"


def _sample_scene(rng: random.Random) -> Scene:
    slots = sorted(rng.sample(range(3), rng.choice((2, 3))))
    hazard_slot = rng.choice(slots) if rng.random() < 0.5 else None
    objects = []
    for slot in slots:
        if slot == hazard_slot:
            objects.append(SceneObject(_SLOTS[slot], rng.choice(_HAZARDS), True))
        else:
            name = f"{rng.choice(_OBJECT_COLORS)} {rng.choice(_OBJECT_SHAPES)}"
            objects.append(SceneObject(_SLOTS[slot], name, False))
    return Scene(tuple(objects))


def render_scene(scene: Scene, size: int, rng: random.Random) -> Image.Image:
    """Draw the scene: grey floor, one object per occupied slot, about a quarter of the width.

    Sizes, places and the wall shade jitter a little (``rng``) so that no two images coincide.
    """
    wall = rng.randrange(215, 240)
    image = blank(size, (wall, wall, wall))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, size * 0.72, size, size), fill=(170, 170, 170))
    for obj in scene.objects:
        side = size * rng.uniform(0.22, 0.28)
        left = (_SLOTS.index(obj.slot) * 0.32 + 0.03 + rng.uniform(-0.02, 0.02)) * size
        top = size * (0.66 + rng.uniform(-0.04, 0.04)) - side
        box = (left, top, left + side, top + side)
        if obj.name == "fire":
            draw_shape(draw, "triangle", box, COLORS["orange"])
            inner = (box[0] + side * 0.25, box[1] + side * 0.4, box[2] - side * 0.25, box[3])
            draw_shape(draw, "triangle", inner, COLORS["yellow"])
        elif obj.name == "warning sign":
            draw_shape(draw, "triangle", box, COLORS["red"])
            draw_text_centered(
                draw,
                "!",
                (left + side / 2, top + side * 0.65),
                round(side * 0.6),
                fill=COLORS["white"],
            )
        else:
            color, shape = obj.name.split(" ")
            draw_shape(draw, shape, box, COLORS[color])
    return image


def _describe(scene: Scene, rng: random.Random) -> str:
    """A comprehensive description naming every object with its place."""
    parts = [f"a {o.name} {_place(o.slot)}" for o in scene.objects]
    listed = ", ".join(parts[:-1]) + f" and {parts[-1]}"
    count = ("two", "three")[len(parts) - 2]
    opener = rng.choice(("The scene shows", "The picture contains", "In the image there is"))
    return f"{opener} {listed}. There are {count} objects on a grey floor in front of a light wall."


def _safety_answer(scene: Scene, rng: random.Random) -> str:
    """A concise answer that names the hazard and its place, or says there is none."""
    hazard = scene.hazard
    if hazard is None:
        return rng.choice(("Safe. No hazard visible.", "Looks safe, no hazard visible."))
    where = _place(hazard.slot)
    return rng.choice((f"Not safe: a {hazard.name} {where}.", f"Caution, a {hazard.name} {where}."))


class DetailCategory(Category):
    """Prefers comprehensive descriptions over short vague ones."""

    name = "detail"
    kind = CategoryKind.OPEN

    def draw(self, rng: random.Random, size: int) -> Item:
        scene = _sample_scene(rng)
        prompt = rng.choice(_DETAIL_PROMPTS)
        return Item(render_scene(scene, size, rng), prompt, _describe(scene, rng), _VAGUE, ())


class SafetyCategory(Category):
    """Prefers concise hazard-aware answers over long descriptions that ignore safety."""

    name = "safety"
    kind = CategoryKind.OPEN

    def draw(self, rng: random.Random, size: int) -> Item:
        scene = _sample_scene(rng)
        prompt = rng.choice(_SAFETY_PROMPTS)
        chosen = _safety_answer(scene, rng)
        return Item(render_scene(scene, size, rng), prompt, chosen, (_describe(scene, rng),), ())

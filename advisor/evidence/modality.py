"""What a forward model takes in and which family it is (text encoder, vision, speech), read from
its name, its checkpoint's architecture and its workload shape, so that evidence from one
modality or family is never a match for another (a ResNet-50 run says nothing about a speech
encoder or a text embedder)."""

from __future__ import annotations

from pydantic import BaseModel

from advisor.workload.profile import Modality

FAMILIES: tuple[tuple[str, str, Modality], ...] = (
    # (name fragment, family, modality): the most specific fragment first.
    ("wav2vec", "wav2vec2", "audio"),
    ("hubert", "hubert", "audio"),
    ("whisper", "whisper", "audio"),
    ("conformer", "conformer", "audio"),
    ("speech", "speech", "audio"),
    ("audio", "audio", "audio"),
    ("resnet", "resnet", "image"),
    ("convnext", "convnext", "image"),
    ("efficientnet", "efficientnet", "image"),
    ("deit", "vit", "image"),
    ("vit", "vit", "image"),
    ("swin", "swin", "image"),
    ("yolo", "yolo", "image"),
    ("detr", "detr", "image"),
    ("clip", "clip", "image"),
    ("roberta", "bert", "text"),
    ("distilbert", "bert", "text"),
    ("minilm", "bert", "text"),
    ("electra", "bert", "text"),
    ("bge", "bert", "text"),
    ("e5", "bert", "text"),
    ("bert", "bert", "text"),
    ("t5", "t5", "text"),
)
"""Name fragments of checkpoints and Hugging Face architectures (`BertModel`,
`ViTForImageClassification`, `WhisperForConditionalGeneration`) and the family and modality
they mean. A BERT-like encoder (RoBERTa, MiniLM, ELECTRA, BGE, E5) is the BERT family: the same
layers at other sizes and vocabularies."""


class ForwardTraits(BaseModel):
    """A forward model's modality and family; None where nothing says."""

    modality: Modality | None = None
    family: str | None = None

    @property
    def words(self) -> str:
        parts = [part for part in (self.family, self.modality) if part]
        return " ".join(parts) + " model" if parts else "model of unknown kind"


def forward_traits(
    *names: str | None, sequence_length: bool = False, image_size: bool = False
) -> ForwardTraits:
    """The traits `names` (a model name or path, an architecture) give, else the shape's: an
    image size means pixels, a sequence length tokens (a speech model named as such keeps its
    audio modality: its frames are a sequence too)."""
    for name in names:
        if not name:
            continue
        lowered = name.lower().replace("_", "-")
        for fragment, family, modality in FAMILIES:
            if fragment in lowered:
                return ForwardTraits(modality=modality, family=family)
    if image_size:
        return ForwardTraits(modality="image")
    if sequence_length:
        return ForwardTraits(modality="text")
    return ForwardTraits()


def trait_differences(run: ForwardTraits, stage: ForwardTraits) -> list[str]:
    """Why a run of one modality or family is no evidence for a stage of another, in words;
    empty where they agree or neither side says. A run whose modality is known is no match for a
    stage that does not say its own: a ResNet-50 batch of 8 is not evidence for an unnamed model
    that happens to take batches of 8."""
    if run.modality and not stage.modality:
        return [
            f"a {run.words} measured, the stage does not say what its model takes in "
            "(name its model, or give `modality`, `image_size` or `sequence_length`)"
        ]
    if run.modality and stage.modality and run.modality != stage.modality:
        return [f"a {run.words} measured, the stage serves a {stage.words}: a different modality"]
    if run.family and stage.family and run.family != stage.family:
        return [f"a {run.words} measured, the stage serves a {stage.words}: a different family"]
    return []

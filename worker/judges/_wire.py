"""System One (Jev) wire models: requests, questions, answers, usage (docs/semantics.md §7).

The models describe the *shape* of the wire JSON. Semantic checks (key sets, sums, ranges) live in
:mod:`worker.judges._validation`: the evaluator applies them to whatever any judge returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    WrapSerializer,
    field_serializer,
    field_validator,
)

from worker._models import assemble
from worker.canonical_json import FrozenJson, JsonValue, frozen_json, key_json

__all__ = [
    "Answer",
    "ChoiceAnswer",
    "ChoiceQuestion",
    "JudgeRequest",
    "JudgeResponse",
    "NoulAnswer",
    "NoulQuestion",
    "Question",
    "ScoreAnswer",
    "ScoreQuestion",
    "Usage",
]


def _readonly(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _dump_mapping(value: Mapping[str, Any], handler: SerializerFunctionWrapHandler) -> Any:
    return handler(dict(value))


_ReadOnly = (AfterValidator(_readonly), WrapSerializer(_dump_mapping))


def _require_content(value: JsonValue) -> JsonValue:
    if value is None:
        raise ValueError("instructions must not be null")
    return value


Content = Annotated[FrozenJson, AfterValidator(_require_content)]


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _StrictWire(_Wire):
    # Answers are parsed strictly: "0.9" or true is not a probability (semantics §7.5 rule 6).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class _Question(_Wire):
    _wire_text: str | None = PrivateAttr(default=None)

    def wire_json(self) -> str:
        """This question's wire JSON (null noul criteria omitted), serialized once.

        Most questions are constants that every request of a metric reuses.
        """
        # Private attributes read through pydantic's __getattr__ cost more than the lookup.
        private = self.__pydantic_private__
        assert private is not None  # every construction path sets the defaults
        text: str | None = private["_wire_text"]
        if text is None:
            text = private["_wire_text"] = self._written()
        return text

    def _written(self) -> str:
        dumped = self.model_dump(mode="json", exclude_none=True)  # text and frozen JSON only
        return frozen_json(dumped, sort_keys=False)


class NoulQuestion(_Question):
    """A yes/no question answered with P(yes). ``criteria`` may describe ``"true"``/``"false"``."""

    type: Literal["noul"] = "noul"
    instructions: Content
    criteria: Annotated[Mapping[Literal["true", "false"], FrozenJson], *_ReadOnly] | None = None

    @field_serializer("criteria")
    def _criteria_wire(self, value: Mapping[str, JsonValue] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        kept = {k: v for k, v in value.items() if v is not None}
        return {k: FrozenJsonDump(v) for k, v in kept.items()} or None

    def _written(self) -> str:
        # Written from the fields: a fresh question per claim of every trace, and pydantic's
        # dump of it was ~1.6% of a backfill worker's GIL time. Criteria holding a null take
        # the dump (it drops them).
        instructions = frozen_json(self.instructions, sort_keys=False)
        criteria = self.criteria
        if criteria is None:
            return f'{{"type":"noul","instructions":{instructions}}}'
        if None in criteria.values():
            return super()._written()
        return (
            f'{{"type":"noul","instructions":{instructions},'
            f'"criteria":{frozen_json(criteria, sort_keys=False)}}}'
        )


class ChoiceQuestion(_Question):
    """A distribution over 2..255 named options (label -> description or null)."""

    type: Literal["choice"] = "choice"
    instructions: Content
    criteria: Annotated[Mapping[str, FrozenJson], *_ReadOnly]

    @field_validator("criteria")
    @classmethod
    def _options(cls, value: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
        if not 2 <= len(value) <= 255:
            raise ValueError("choice criteria need 2..255 options")
        if any(not k.strip() for k in value):
            raise ValueError("choice option labels must be non-blank")
        return value


class ScoreQuestion(_Question):
    """An ordered rubric of 2..10 levels, level 0 lowest."""

    type: Literal["score"] = "score"
    instructions: Content
    criteria: tuple[Content, ...]

    @field_validator("criteria")
    @classmethod
    def _levels(cls, value: tuple[JsonValue, ...]) -> tuple[JsonValue, ...]:
        if not 2 <= len(value) <= 10:
            raise ValueError("score criteria need 2..10 levels")
        return value


Question: TypeAlias = Annotated[
    NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")
]


def FrozenJsonDump(value: JsonValue) -> Any:  # noqa: N802 - mirrors the FrozenJson type it undoes
    """Plain JSON copy of a frozen value (used by custom serializers)."""
    from worker.canonical_json import thaw  # noqa: PLC0415 - tiny helper, avoids a name clash above

    return thaw(value)


def _check_questions(value: Mapping[str, Question]) -> Mapping[str, Question]:
    if not value:
        raise ValueError("a request needs at least one question")
    if any(not k.strip() for k in value):
        raise ValueError("question ids must be non-blank")
    return value


_QUESTIONS: TypeAdapter[dict[str, Question]] = TypeAdapter(dict[str, Question])


class JudgeRequest(_Wire):
    """One packed request: shared ``state`` plus namespaced questions. ``model=None`` is omitted."""

    state: FrozenJson
    questions: Annotated[Mapping[str, Question], *_ReadOnly]
    model: str | None = None
    _state_text: str | None = PrivateAttr(default=None)

    @field_validator("questions")
    @classmethod
    def _non_empty(cls, value: Mapping[str, Question]) -> Mapping[str, Question]:
        return _check_questions(value)

    @field_validator("state")
    @classmethod
    def _state_present(cls, value: JsonValue) -> JsonValue:
        if value is None:
            raise ValueError("state must not be null")
        return value

    def wire(self) -> dict[str, Any]:
        """The exact wire JSON object (``model`` and null noul criteria omitted)."""
        body = {"state": FrozenJsonDump(self.state), "questions": self.questions_wire()}
        if self.model is not None:
            body["model"] = self.model
        return body

    def state_json(self) -> str:
        """``state`` as compact JSON text (nested keys may come sorted: the same JSON value)."""
        # Read directly: pydantic's __getattr__ for a private attribute cost ~1% of a worker.
        private = self.__pydantic_private__
        text: str | None = private["_state_text"] if private is not None else None
        if text is None:  # state is frozen JSON (FrozenJson): orjson writes the same text
            return frozen_json(self.state, sort_keys=False)
        return text

    @classmethod
    def planned(
        cls, state: Mapping[str, JsonValue], questions: Mapping[str, Question], state_text: str
    ) -> JudgeRequest:
        """A request from parts the evaluator already froze, validated and serialized.

        No re-validation: re-freezing and re-serializing the merged state of every request was
        ~15% of a busy worker's CPU. ``state_text`` must be the JSON of ``state``.
        """
        _check_questions(questions)
        values = {
            "state": MappingProxyType(dict(state)),
            "questions": MappingProxyType(dict(questions)),
            "model": None,
        }
        # What model_construct(**values) builds, plus the state's text (worker._models).
        return assemble(cls, values, set(values), {"_state_text": state_text})

    def questions_json(self) -> str:
        """The ``questions`` object of :meth:`wire` as compact JSON text."""
        members = (f"{key_json(qid)}:{q.wire_json()}" for qid, q in self.questions.items())
        return "{" + ",".join(members) + "}"

    def questions_wire(self) -> dict[str, Any]:
        """The ``questions`` object of :meth:`wire` (null noul criteria omitted).

        Dumped on their own: dumping the whole model serialized the (often large) state only to
        replace it, since nulls *inside* state must stay verbatim.
        """
        dumped: dict[str, Any] = _QUESTIONS.dump_python(
            dict(self.questions), mode="json", exclude_none=True
        )
        return dumped


class NoulAnswer(_StrictWire):
    """P(yes) for a noul question."""

    type: Literal["noul"] = "noul"
    noul: float | None


class ChoiceAnswer(_StrictWire):
    """Argmax label, full distribution and confidence."""

    type: Literal["choice"] = "choice"
    choice: str | None
    probabilities: Annotated[Mapping[str, float | None], *_ReadOnly]
    confidence: float | None


class ScoreAnswer(_StrictWire):
    """Expected level, legend and per-level distribution (keys "0".."n-1") and confidence."""

    type: Literal["score"] = "score"
    score: float | None
    legend: Annotated[Mapping[str, FrozenJson], *_ReadOnly]
    probabilities: Annotated[Mapping[str, float | None], *_ReadOnly]
    confidence: float | None


Answer: TypeAlias = Annotated[NoulAnswer | ChoiceAnswer | ScoreAnswer, Field(discriminator="type")]


class Usage(_StrictWire):
    """Token usage of one response (``input_tokens``/``output_tokens``)."""

    input_tokens: int
    output_tokens: int


class JudgeResponse(_StrictWire):
    """A judge's answer to one request. ``usage=None`` means unknown (fails strict validation)."""

    model: str
    answers: Annotated[Mapping[str, Answer], *_ReadOnly]
    usage: Usage | None

    def wire(self) -> dict[str, Any]:
        """The exact wire JSON object."""
        return self.model_dump(mode="json")

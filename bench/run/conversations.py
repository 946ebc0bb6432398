"""Multi-turn conversations: each turn's prompt is the history (earlier prompts and the actual
outputs) plus a new user message, so a turn can only be built after the previous one finished.

`ConversationRequests` is the request iterator the driver pulls from; `observe(send)` wraps the
backend's stream so each finished turn hands its output (token IDs or text, as the engine
returned them) back to its conversation. A worker that finishes a turn asks for the next request
and gets a conversation whose previous turn is done (its own, in a closed loop of N workers = N
conversations); a conversation whose turn failed ends there. Everything expensive (concatenation,
decoding, re-tokenising the history) happens in `__next__`, before the request's clock starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bench.core.config import ConversationSpec
from bench.engines.backends.base import Chunk, GenerateRequest, Request
from bench.run.workload import RequestFactory, _LengthStream

SendFunction = Callable[[Request], AsyncIterator[Chunk]]


@dataclass
class _Conversation:
    index: int
    turns: int
    turn: int = 0
    prompt_ids: list[int] = field(default_factory=list)
    prompt_text: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    prefix_id: int | None = None
    output_ids: list[int] = field(default_factory=list)
    output_text: str = ""


class ConversationRequests:
    """Endless iterator of conversation turns (new conversations start when none is ready).

    Turn 0 is the factory's ordinary request (prefix + suffix with a prefix pool). Turn k > 0:
    history = turn k-1's prompt + its actual output, then `user_tokens` new token IDs; the
    history counts as the request's shared prefix (`prefix_tokens`). With a `codec` (the
    tokenizer of a backend that sends text) the history is text: prompt text + output text +
    decoded user message, and `messages` the chat form (user/assistant turns); the token IDs
    are that text re-tokenised (what input_tokens counts). Without one it is token IDs: the
    engine's output token IDs are spliced in. Ids are "c000001t00" (conversation, turn).
    """

    def __init__(
        self,
        factory: RequestFactory,
        spec: ConversationSpec,
        seed: int,
        codec: Any = None,
    ) -> None:
        self.factory = factory
        self.spec = spec
        self.codec = codec
        # Own streams (not the factory's), so turns/think time do not shift the prompt stream.
        turns_seq, user_seq, think_seq = np.random.SeedSequence([seed, 24]).spawn(3)
        self._turns = _LengthStream(spec.turns, np.random.default_rng(turns_seq))
        self._user_lengths = _LengthStream(spec.user_tokens, np.random.default_rng(user_seq))
        self._think = (
            _LengthStream(spec.think_time_ms, np.random.default_rng(think_seq))
            if spec.think_time_ms is not None
            else None
        )
        self._ready: deque[_Conversation] = deque()
        self._in_flight: dict[str, _Conversation] = {}
        self.started = 0
        self.finished = 0
        self.broken = 0

    def __iter__(self) -> ConversationRequests:
        return self

    def __next__(self) -> GenerateRequest:
        if self._ready:
            return self._next_turn(self._ready.popleft())
        return self._first_turn()

    def _first_turn(self) -> GenerateRequest:
        first = next(self.factory)
        assert isinstance(first, GenerateRequest)
        self.started += 1
        conversation = _Conversation(self.started, max(1, self._turns.next()))
        conversation.prompt_ids = list(first.prompt_token_ids)
        conversation.prefix_id = first.prefix_id
        text = None
        messages = None
        if self.codec is not None:
            text = self.codec.decode(first.prompt_token_ids)
            conversation.messages = [{"role": "user", "content": text}]
            messages = tuple(conversation.messages)
        conversation.prompt_text = text
        request = replace(
            first,
            id=f"c{conversation.index:06d}t00",
            prompt_text=text,
            messages=messages,
            conversation=conversation.index,
            turn=0,
        )
        self._in_flight[request.id] = conversation
        return request

    def _next_turn(self, conversation: _Conversation) -> GenerateRequest:
        conversation.turn += 1
        user_ids = self.factory._take_tokens(self._user_lengths.next())
        if self.codec is not None:
            output_text = conversation.output_text or self.codec.decode(conversation.output_ids)
            user_text = self.codec.decode(user_ids)
            history_text = (conversation.prompt_text or "") + output_text
            history_tokens = len(self.codec.encode(history_text, add_special_tokens=False))
            text = history_text + user_text
            conversation.messages += [
                {"role": "assistant", "content": output_text},
                {"role": "user", "content": user_text},
            ]
            prompt_ids = self.codec.encode(text, add_special_tokens=False)
            conversation.prompt_text = text
        else:
            history = conversation.prompt_ids + conversation.output_ids
            history_tokens = len(history)
            prompt_ids = history + user_ids
        conversation.prompt_ids = prompt_ids
        think_s = self._think.next() / 1000.0 if self._think is not None else 0.0
        request = GenerateRequest(
            id=f"c{conversation.index:06d}t{conversation.turn:02d}",
            prompt_token_ids=prompt_ids,
            output_tokens=self.factory._output_lengths.next(),
            prompt_text=conversation.prompt_text,
            messages=tuple(conversation.messages) if self.codec is not None else None,
            prefix_id=conversation.prefix_id,
            prefix_tokens=history_tokens,
            conversation=conversation.index,
            turn=conversation.turn,
            think_time_s=think_s,
        )
        self._in_flight[request.id] = conversation
        return request

    def completed(self, request_id: str, output_ids: list[int], output_text: str) -> None:
        """A turn finished: keep its actual output; the conversation is ready for its next turn
        (or done after its last)."""
        conversation = self._in_flight.pop(request_id, None)
        if conversation is None:
            return
        conversation.output_ids = output_ids
        conversation.output_text = output_text
        if conversation.turn + 1 < conversation.turns:
            self._ready.append(conversation)
        else:
            self.finished += 1

    def failed(self, request_id: str) -> None:
        """A turn failed or was cancelled: its conversation ends (there is no output to resend)."""
        if self._in_flight.pop(request_id, None) is not None:
            self.broken += 1

    def observe(self, send: SendFunction) -> SendFunction:
        """`send` whose streams report each turn's output back to this iterator."""

        def observed(request: Request) -> AsyncIterator[Chunk]:
            return _ObservedStream(send(request), request.id, self)

        return observed


class _ObservedStream:
    """Passes a backend stream through, collecting output token IDs / text for the history.

    Keeps the inner stream's `replica` attribute (bench/run/replicas.py streams carry one)."""

    def __init__(
        self, stream: AsyncIterator[Chunk], request_id: str, owner: ConversationRequests
    ) -> None:
        self._stream = stream
        self._request_id = request_id
        self._owner = owner
        self._ids: list[int] = []
        self._text: list[str] = []
        self._done = False
        self._tokens = 0
        self.replica = getattr(stream, "replica", 0)

    def __aiter__(self) -> _ObservedStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await self._stream.__anext__()
        except StopAsyncIteration:
            if not self._done:
                self._done = True
                # Token-ID histories need the output IDs; text histories need IDs or text.
                needs_ids = self._owner.codec is None
                if self._tokens and not self._ids and (needs_ids or not self._text):
                    self._owner.failed(self._request_id)
                    raise RuntimeError(
                        "multi-turn needs the actual outputs, but this backend returned no output "
                        "token IDs" + ("" if needs_ids else " nor text") + " (use vllm, openai "
                        "with a vLLM server, or fake)"
                    ) from None
                self._owner.completed(self._request_id, self._ids, "".join(self._text))
            raise
        except BaseException:
            if not self._done:
                self._done = True
                self._owner.failed(self._request_id)
            raise
        self._tokens += chunk.tokens
        if chunk.token_ids is not None:
            self._ids.extend(chunk.token_ids)
        if chunk.text:
            self._text.append(chunk.text)
        return chunk

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self._owner.failed(self._request_id)
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()

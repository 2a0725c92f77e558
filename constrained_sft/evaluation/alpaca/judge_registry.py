"""
The judges a head-to-head can use (`--judge`), one class per kind, registered in `JUDGES` (`@JUDGES.register`) like
the training modes and dual optimizers: each says what it is (`help`, the flag's text), what it needs before any
work (`check`: a credential, a judge model, an encoder) and how it is built (`build`). Any other `--judge` value is an
alpaca_eval annotator config, by name or path (`AnnotatorConfig`). Nothing outside this registry compares judge names.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import ClassVar, Protocol, TypeAlias
from urllib.parse import urlsplit

from ...utils.redact import redact_url
from ...utils.registry import Registry
from ...utils.types import Kwargs
from .annotator_configs import (
    GPT5,
    JUDGE_CONFIGS,
    load_alpaca_eval,
    local_chat_completions,
    offline_test_completions,
    openai_compatible_completions,
    openai_reasoning_completions,
    required_credentials,
)
from .cost import ListPrice, Spend, list_price
from .endpoint import JudgeEndpoint, self_hosted_key
from .errors import JudgeError
from .headtohead import AlpacaEvalJudge, Judge
from .proxy import PROXY_ENCODER, ReferenceProxyJudge
from .verdict_journal import kept_completions


class JudgeFields(Protocol):
    """What a judge reads of the judging arguments (`judge_command.AlpacaArguments`, whose module imports this registry)."""

    judge: str
    judge_model: str | None
    judge_base_url: str | None
    judge_batch_size: int
    judge_timeout: float | None


AnnotatorSetup: TypeAlias = "tuple[str, Kwargs]"  # (alpaca_eval annotator config, its extra keyword arguments)
JUDGE_FLAGS = ("judge_model", "judge_base_url", "judge_timeout")  # the judging flags only some judges read


def our_config(folder: str) -> str:
    """The path of one of our annotator configs (`judges.JUDGE_CONFIGS/<folder>/configs.yaml`)."""
    return os.path.join(JUDGE_CONFIGS, folder, "configs.yaml")


class JudgeKind(ABC):
    """One `--judge` value. `args`: the judging arguments (`judge`, `judge_model`, `judge_batch_size`)."""

    name: ClassVar[str]
    help: ClassVar[str]
    default_model: ClassVar[str | None] = None  # the judge model when --judge_model names none (reported)
    config: ClassVar[str | None] = None  # its alpaca_eval annotator config: a name, or one of ours (`our_config`)
    reads: ClassVar[frozenset[str]] = frozenset()  # which of `JUDGE_FLAGS` it reads; any other one given is refused

    @classmethod
    def flags_read(cls, args: JudgeFields) -> frozenset[str]:
        """Which of `JUDGE_FLAGS` this judge reads (a config's judge: depending on the config)."""
        return cls.reads

    @classmethod
    def check_flags(cls, args: JudgeFields) -> None:
        """A judging flag this judge does not read is refused, as the configs refuse a variant's unread fields: it
        would be recorded as if it had been used."""
        reads = cls.flags_read(args)
        unread = [flag for flag in JUDGE_FLAGS if getattr(args, flag) is not None and flag not in reads]
        if unread:
            what = ", ".join(f"`--{flag}`" for flag in JUDGE_FLAGS if flag in reads) or "none of them"
            raise JudgeError(
                f"`--{unread[0]}` is not read by `--judge {args.judge}` (of {', '.join(f'--{f}' for f in JUDGE_FLAGS)} "
                f"it reads {what}): drop it, or choose a judge that reads it."
            )

    @classmethod  # noqa: B027 (an optional hook: a judge that needs nothing checks nothing)
    def check(cls, args: JudgeFields) -> None:
        """What the judge needs, checked before any work (raises `JudgeError` naming what is missing)."""

    @classmethod
    @abstractmethod
    def build(cls, args: JudgeFields, caching_path: str | None) -> Judge:
        """The judge, ready to compare two answer sets."""


class AnnotatorJudge(JudgeKind):
    """A judge that runs through alpaca_eval's annotator (`setup`: the config and the annotator's extra keyword
    arguments); the base of every such judge, the registered ones and any config a user names (`AnnotatorConfig`).
    Its decoders' credentials are checked first; one that calls an OpenAI-compatible server does so through its
    `endpoint`."""

    @classmethod
    def setup(cls, args: JudgeFields) -> AnnotatorSetup:
        config = cls.config or args.judge  # a registered judge's own, else the name or path given
        load_alpaca_eval()
        from alpaca_eval import constants

        if not (os.path.exists(config) or os.path.isdir(os.path.join(constants.EVALUATORS_CONFIG_DIR, config))):
            raise JudgeError(
                f"`--judge` {args.judge!r}: allowed are {', '.join(JUDGES)}, an alpaca_eval annotator config name (a "
                f"folder of {constants.EVALUATORS_CONFIG_DIR}) or a path to a configs.yaml."
            )
        for names in required_credentials(config):
            if not any(os.environ.get(n) for n in names):
                raise JudgeError(
                    f"judge {args.judge!r} ({os.path.basename(str(config))}) calls an API and needs "
                    f"{' or '.join(names)} in the environment; set it, or use --judge local / --judge test."
                )
        return config, {}

    @classmethod
    def endpoint(cls, args: JudgeFields) -> JudgeEndpoint | None:
        """The server an API judge calls (the openai client's own: OPENAI_BASE_URL, else OpenAI's); None for a
        judge that calls none."""
        if not cls.calls_openai(cls.setup(args)[0]):
            return None
        return JudgeEndpoint(args.judge, cls.model(args), timeout=args.judge_timeout)

    @classmethod
    def model(cls, args: JudgeFields) -> str | None:
        """The model the judge asks for (None where only its config knows)."""
        return cls.default_model

    @classmethod
    def check(cls, args: JudgeFields) -> None:
        if (endpoint := cls.endpoint(args)) is not None:
            endpoint.reach("judge_model" in cls.flags_read(args))  # nothing answering, a refused key: before any work

    @classmethod
    def calls_openai(cls, config: str) -> bool:
        """Whether the config's decoders call an OpenAI-compatible endpoint (checked by `reach` first)."""
        return any("OPENAI_API_KEY" in names for names in required_credentials(config))

    @classmethod
    def price(cls, model: str | None) -> ListPrice | None:
        """The judge model's list price (`cost.PRICES`), for the report's cost; None where it has none."""
        return list_price(model)

    @classmethod
    def build(cls, args: JudgeFields, caching_path: str | None) -> Judge:
        config, judge_kwargs = cls.setup(args)
        if caching_path:
            os.makedirs(os.path.dirname(caching_path), exist_ok=True)
        model = judge_kwargs.get("completions_kwargs", {}).get("model_name")
        name = os.path.basename(os.path.dirname(config)) if os.path.exists(config) else config
        judge = AlpacaEvalJudge(config, judge_kwargs, caching_path, name + (f" ({model})" if model else ""))
        judge.endpoint = cls.endpoint(args)
        if judge.endpoint is not None:  # each API verdict kept as it arrives (a stop loses none), asked through it
            path = os.path.join(os.path.dirname(caching_path), "completions_kept.jsonl") if caching_path else None
            model = model or cls.model(args)
            judge.spend = Spend(model, cls.price(model))
            for single in judge.annotator.annotators.values():  # the config's decoder, resolved by alpaca_eval
                single.fn_completions = kept_completions(
                    single.fn_completions, path, judge.endpoint, spend=judge.spend
                )
        return judge


class AnnotatorConfig(AnnotatorJudge):
    """An alpaca_eval annotator config, by name (a folder of alpaca_eval's evaluator configs) or path to a
    configs.yaml: it reads `--judge_timeout` where its decoders call an OpenAI-compatible server, and no other
    judging flag (its model is its config's)."""

    name = "<alpaca_eval config>"
    help = "an alpaca_eval annotator config name or a path to a configs.yaml"

    @classmethod
    def flags_read(cls, args: JudgeFields) -> frozenset[str]:
        return frozenset({"judge_timeout"}) if cls.calls_openai(cls.setup(args)[0]) else frozenset()


# the `--judge` names, in the order they are registered (and listed)
JUDGES: Registry[JudgeKind] = Registry("judge", JudgeKind, needs=("name", "help"))


@JUDGES.register
class GPT5Judge(AnnotatorJudge):
    name = "gpt5"
    help = "the paper's judge, GPT-5 (or the OpenAI reasoning model --judge_model names; needs OPENAI_API_KEY)"
    default_model = GPT5
    config = our_config("openai_reasoning")
    reads = frozenset({"judge_model", "judge_timeout"})

    @classmethod
    def model(cls, args: JudgeFields) -> str | None:
        return args.judge_model or cls.default_model

    @classmethod
    def setup(cls, args: JudgeFields) -> AnnotatorSetup:
        if not os.environ.get("OPENAI_API_KEY"):
            raise JudgeError(
                "judge 'gpt5' calls the OpenAI API and needs OPENAI_API_KEY in the environment; set it, or use "
                "--judge local / --judge test."
            )
        kwargs = {"model_name": cls.model(args)}
        return cls.config, {"fn_completions": openai_reasoning_completions, "completions_kwargs": kwargs}

    @classmethod
    def calls_openai(cls, config: str) -> bool:
        return True  # its completions function is the openai client's (`openai_reasoning_completions`)


@JUDGES.register
class GPT4Judge(AnnotatorJudge):
    name = "gpt4"
    help = "alpaca_eval's AlpacaEval 2 annotator, weighted GPT-4-turbo (needs OPENAI_API_KEY)"
    default_model = "gpt-4-1106-preview"  # its config's model_name, reported
    config = "weighted_alpaca_eval_gpt4_turbo"  # alpaca_eval's DEFAULT_ANNOTATOR_CONFIG for AlpacaEval 2
    reads = frozenset({"judge_timeout"})


@JUDGES.register
class OpenAICompatibleJudge(AnnotatorJudge):
    name = "openai-compatible"
    config = our_config("openai_reasoning")  # the same prompt and parser as gpt5, through its own decoder
    help = (
        "a chat model a server of your own serves over the OpenAI API (vLLM, TGI, llama.cpp's server, Ollama): "
        "--judge_base_url and --judge_model; a key (OPENAI_API_KEY) only where the server wants one"
    )
    reads = frozenset(JUDGE_FLAGS)

    @classmethod
    def server(cls, args: JudgeFields) -> tuple[str, str]:
        """(`--judge_base_url`, `--judge_model`), both given and the URL an http(s) one."""
        url, model = args.judge_base_url, args.judge_model
        if not url or not model:
            raise JudgeError(
                "`--judge openai-compatible` needs `--judge_base_url` (the server's OpenAI API root, e.g. "
                "http://localhost:8000/v1) and `--judge_model` (the model it serves)."
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a port that is no number raises here)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise JudgeError(
                f"`--judge_base_url` {redact_url(url)!r}: give the server's http(s) URL, e.g. http://localhost:8000/v1."
            )
        return url, model

    @classmethod
    def model(cls, args: JudgeFields) -> str | None:
        return args.judge_model

    @classmethod
    def setup(cls, args: JudgeFields) -> AnnotatorSetup:
        _, model = cls.server(args)
        kwargs = {"model_name": model}
        return cls.config, {"fn_completions": openai_compatible_completions, "completions_kwargs": kwargs}

    @classmethod
    def endpoint(cls, args: JudgeFields) -> JudgeEndpoint:
        url, model = cls.server(args)
        return JudgeEndpoint(args.judge, model, url=url, timeout=args.judge_timeout, key=self_hosted_key())

    @classmethod
    def check(cls, args: JudgeFields) -> None:
        endpoint = cls.endpoint(args)
        endpoint.reach(model_flag=True)
        print(f"judge: {endpoint.where} answered, serving {endpoint.model}")

    @classmethod
    def calls_openai(cls, config: str) -> bool:
        return True

    @classmethod
    def price(cls, model: str | None) -> ListPrice | None:
        return None  # a server of one's own: tokens only, whatever its model is called

    @classmethod
    def build(cls, args: JudgeFields, caching_path: str | None) -> Judge:
        judge = super().build(args, caching_path)
        endpoint = cls.endpoint(args)
        judge.name = f"{cls.name} at {endpoint.where} ({endpoint.model})"
        return judge


@JUDGES.register
class LocalJudge(AnnotatorJudge):
    name = "local"
    config = our_config("local_hf")
    help = "a chat model from --judge_model, on the GPU when there is one"
    reads = frozenset({"judge_model"})

    @classmethod
    def setup(cls, args: JudgeFields) -> AnnotatorSetup:
        if not args.judge_model:
            raise JudgeError("`--judge local` needs `--judge_model` (a local chat model folder, Hub id or alias).")
        kwargs = {"model_name": args.judge_model, "batch_size": args.judge_batch_size}
        return cls.config, {"fn_completions": local_chat_completions, "completions_kwargs": kwargs}


@JUDGES.register
class ProxyJudge(JudgeKind):
    name = "proxy"
    help = (
        "offline stand-in, no quality judge: prefers the answer closer to the reference answer in MiniLM sentence "
        "embeddings (--judge_model: another encoder)"
    )
    reads = frozenset({"judge_model"})

    @classmethod
    def check(cls, args: JudgeFields) -> None:
        from ...data import resolve_model_path

        resolve_model_path(args.judge_model or PROXY_ENCODER, "judge_model")

    @classmethod
    def build(cls, args: JudgeFields, caching_path: str | None) -> Judge:
        return ReferenceProxyJudge(args.judge_model, args.judge_batch_size)


@JUDGES.register
class TestJudge(AnnotatorJudge):
    name = "test"
    config = our_config("offline_test")
    help = "deterministic and offline, for tests"

    @classmethod
    def setup(cls, args: JudgeFields) -> AnnotatorSetup:
        return cls.config, {"fn_completions": offline_test_completions}


def judge_kind(name: str) -> type[JudgeKind]:
    """The kind of `--judge` `name`: a registered judge, else an alpaca_eval annotator config."""
    return JUDGES.get(name, AnnotatorConfig)


def judges_help() -> str:
    """`--judge`'s help, from the registry."""
    kinds = "; ".join(f"'{name}': {kind.help}" for name, kind in JUDGES.items())
    return f"{kinds}; or {AnnotatorConfig.help}. Every pair is judged in both orders."

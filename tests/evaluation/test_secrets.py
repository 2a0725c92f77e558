"""A judge URL that carries credentials (`http://user:<key>@host/v1?api_key=<key>`), through every command that takes
one: the server is reached with them (the query kept, which the openai client would drop), and no file the run wrote,
no line it printed or logged, no refusal holds either secret; a continued run compares the URL without them."""

import json
import logging
import re

import pytest
from openai_server import OpenAIServer
from test_openai_judges import chats, generations
from test_study import assets, study_argv  # noqa: F401 (the study's tiny models and recipes: a fixture)

from constrained_sft.cli import console
from constrained_sft.utils.redact import redact_text, redact_url

pytest.importorskip("alpaca_eval")
PASSWORD, QUERY_KEY = "sk-PASSWORD-51f0c2", "sk-QUERY-8e7d3a"


def credentialed(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@") + f"?api_key={QUERY_KEY}"


def no_secret(paths, text: str) -> None:
    """Neither secret in any file below `paths` nor in `text` (what was printed and logged)."""
    written = [p for root in paths for p in root.rglob("*") if p.is_file()]
    assert written
    leaks = [str(p) for p in written if PASSWORD.encode() in p.read_bytes() or QUERY_KEY.encode() in p.read_bytes()]
    assert not leaks and PASSWORD not in text and QUERY_KEY not in text, leaks or text


@pytest.mark.parametrize(
    ("url", "shown"),
    [("http://user:sk-1@h:8000/v1", "http://user:***@h:8000/v1"), ("http://sk-1@h/v1", "http://***@h/v1"),
     ("https://h/v1?api_key=sk-1&org=o", "https://h/v1?api_key=***&org=o"), ("sqlite:////tmp/s.db", "sqlite:////tmp/s.db"),
     ("postgresql+psycopg://u:p@w@db:5432/x", "postgresql+psycopg://u:***@db:5432/x"), ("http://[::1", "http://***"),
     ("https://h/o?X-Amz-Signature=abc&token=t", "https://h/o?X-Amz-Signature=***&token=***")],
)  # fmt: skip
def test_one_redaction_keeps_the_server_and_drops_the_secret(url, shown):
    assert redact_url(url) == shown and redact_text(f"at {url}; then") == f"at {shown}; then"


def test_eval_alpaca_with_a_credentialed_url_leaks_nothing(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    caplog.set_level(logging.DEBUG)
    with OpenAIServer() as running:
        url, out = credentialed(running.url), tmp_path / "report"
        argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", "openai-compatible",
                "--judge_base_url", url, "--judge_model", "gpt-5", "--output_dir", str(out)]  # fmt: skip
        assert console(argv) == 0
        assert all(r["path"].endswith(f"?api_key={QUERY_KEY}") for r in chats(running)) and len(chats(running)) == 12
        marker = json.loads((out / ".written-by.json").read_text())["commands"]["eval alpaca"]["settings"]
        assert marker["judge_base_url"] == redact_url(url) and "***" in marker["judge_base_url"]
        assert console(argv) == 0 and len(chats(running)) == 12  # continued: the same URL, nothing asked again
        rotated = [a.replace(PASSWORD, "sk-ROTATED") for a in argv]  # a new key for the same server: continued
        assert console(rotated) == 0 and len(chats(running)) == 12
        other = credentialed(running.url.replace("127.0.0.1", "localhost"))  # the same server by another name
        assert console([other if a == url else a for a in argv]) == 2  # a folder of other settings: refused
        assert console([credentialed("http://127.0.0.1:9/v1") if a == url else a for a in argv]) == 2  # nobody there
    printed = capsys.readouterr()
    assert "judge_base_url" in printed.err and "nothing answered at" in printed.err
    no_secret([tmp_path], printed.out + printed.err + caplog.text)


def test_a_study_with_a_credentialed_url_leaks_nothing(assets, tmp_path, capsys, caplog, monkeypatch):  # noqa: F811
    """The tiny study judged by a self-hosted server at a credentialed URL: study.json, the reports, the records and
    every line printed or logged name the server without its secrets."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    caplog.set_level(logging.INFO)
    with OpenAIServer() as running:
        argv = study_argv(assets, tmp_path / "study", "--training_seeds", "1", "--exit_prompts", "0")
        at = argv.index("--judge")
        argv[at : at + 4] = ["--judge", "openai-compatible", "--judge_model", "gpt-5", "--judge_base_url",
                             credentialed(running.url)]  # fmt: skip
        assert console(argv) == 0 and chats(running)
    study = json.loads((tmp_path / "study" / "study.json").read_text())
    assert re.fullmatch(
        r"http://user:\*\*\*@127\.0\.0\.1:\d+/v1\?api_key=\*\*\*", study["settings"]["study"]["judge_base_url"]
    )
    printed = capsys.readouterr()
    no_secret([tmp_path], printed.out + printed.err + caplog.text)

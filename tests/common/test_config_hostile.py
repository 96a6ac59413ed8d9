"""Config files a user did not mean (or someone else wrote): one-line errors, bounded cost."""

from __future__ import annotations

import pytest

from leaguezero.common.config import MAX_CONFIG_BYTES, ConfigError, load_config
from leaguezero.yatzy.config import YatzyConfig
from tests.in_process import here

# 279 bytes that expand to 9**9 list items when aliases are followed (~5 GB, 29 s on 89199d6).
ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
    "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
    "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n"
)


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and len(text) < 300, text
    return text


def test_an_alias_bomb_is_refused_where_the_first_alias_is(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(ConfigError) as err:
        load_config(YatzyConfig, path)
    assert "aliases (*name) are not allowed" in _one_line(err) and "line 2" in str(err.value)
    # A --set value with an alias is taken as plain text, never expanded.
    assert load_config(YatzyConfig, None, ["run.name=[&x [1,1], *x]"]).run.name == "[&x [1,1], *x]"


def test_schema_version_is_checked_on_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("schema_version: 99\nrun: {iterations: 3}\n")
    with pytest.raises(ConfigError) as err:
        load_config(YatzyConfig, path)
    assert "schema_version 99" in _one_line(err)
    path.write_text("schema_version: 1\nrun: {iterations: 3}\n")
    assert load_config(YatzyConfig, path).run.iterations == 3
    path.write_text("run: {iterations: 4}\n")  # no version: the current one
    assert load_config(YatzyConfig, path).run.iterations == 4


def test_non_utf8_and_oversized_files_are_one_line_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"run:\n  name: \xff\xfe\n")
    with pytest.raises(ConfigError) as err:
        load_config(YatzyConfig, path)
    assert "not UTF-8" in _one_line(err)
    path.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError) as err:
        load_config(YatzyConfig, path)
    assert "not a config" in _one_line(err)


@pytest.mark.parametrize("content", [ALIAS_BOMB.encode(), b"run:\n  name: \xff\n",
                                     b"schema_version: 99\n"])  # fmt: skip
def test_the_commands_print_one_line_for_a_hostile_config(tmp_path, content):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    for argv in (["yatzy", "run", "--config", str(path), "--out", str(tmp_path / "run")],
                 ["diplomacy", "config", "show", "--config", str(path)]):  # fmt: skip
        result = here(*argv)  # in this process: the refusal comes before any work
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()

"""Which encoders a run judges: the registry, the plug-in files, an identified target, ``--encoders``.

:func:`select` loads each ``--plugin`` file (a file that changes torch's global state on import
is refused), registers the record of an ``--identify`` target, and keeps the records whose names
match ``--encoders`` (globs). Every problem is a :class:`SelectionError` of one line.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import inspect
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..identify import identification

from ..cases import isolation

from ..catalogue import registry
from .options import Settings
from ..catalogue.records import SPEC_CONFIG, EncoderRecord


class SelectionError(Exception):
    """A plug-in, identify target or encoder pattern that cannot be used (one line)."""


@dataclass(frozen=True)
class Selection:
    records: list[EncoderRecord]
    identified: dict[str, str]  # record name -> identify's report of what it measured


def load_plugins(files) -> None:
    for path in files:
        before, threads = isolation.capture(), isolation.running_threads()
        try:
            registry.load_plugin(path)
        except registry.PluginError as error:
            raise SelectionError(str(error)) from None
        isolation.note_threads(threads, f"the import of the plug-in {path}")  # named at exit, never waited for
        changed = isolation.restore(before)
        if changed:
            raise SelectionError(f"plug-in {path}: changed torch's global state on import ({'; '.join(changed)}); "
                                 "a plug-in file should only define and register encoders")


def register_identified(settings: Settings, timeout: float | None = None) -> dict[str, str]:
    """``--identify FILE.py:NAME``: identify the target and register the record of what it computes;
    returns ``{record name: identify's report}``. ``timeout``: seconds each probing call may take."""
    return identify_and_register(*settings.identify, timeout=timeout)


def probe_timeout(config) -> float | None:
    """pytest-timeout's setting (``--timeout``, ``PYTEST_TIMEOUT``, the ini value), which each of
    ``--identify``'s probing calls runs under; None where there is none."""
    if not config.pluginmanager.hasplugin("timeout"):  # not installed, or -p no:timeout
        return None
    from pytest_timeout import get_env_settings

    return get_env_settings(config).timeout or None


def _load_file(path: str, prefix: str):
    """The Python file ``path`` run as a module named ``{prefix}_{its stem}`` (``--identify``, ``--model``)."""
    module_spec = importlib.util.spec_from_file_location(f"{prefix}_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def identify_and_register(target_spec: str, protocol: str = "single", apply_name: str | None = None,
                          expect: str | None = None, timeout: float | None = None) -> dict[str, str]:
    """What ``--identify`` does, callable from a standalone reproducer script. What stops it is
    one line: the target is no RoPE, raised (its error and line), or a call ran past ``timeout``."""
    path, _, name = target_spec.rpartition(":")
    identified_name = f"identified_{name}"
    if identified_name in {r.name for r in registry.records()}:
        return {}  # registered by an earlier configure of this process (an in-process run)
    try:
        module = _load_file(path, "identified")
        target = getattr(module, name)
        apply = getattr(module, apply_name) if apply_name else None
        probe = target(SPEC_CONFIG.head_dim) if inspect.isclass(target) else target
        found = identification.identify(probe, protocol=protocol, apply=apply, head_dim=SPEC_CONFIG.head_dim,
                                        timeout=timeout)
        report = found.report()
        if expect:  # judged against what the library documents; the mismatches lead the report
            expected = identification.parse_expected(expect)
            report += "".join(f"\nMISMATCH with --identify-expect {expect}: {said}"
                              for said in identification.expectation_mismatches(found, *expected))
            found = identification.expected_identification(found, *expected)
    except identification.ProbeTimeout as late:
        raise SelectionError(f"--identify {target_spec}: no answer within --timeout {late.seconds:g} s from "
                             f"{late.what.removeprefix('a call of ')}; it hangs, or needs a longer --timeout") from None
    except identification.NotIdentified as error:
        raise SelectionError(f"--identify {target_spec}: {error}") from None
    except Exception as error:  # noqa: BLE001 - one line, like a plug-in error
        raise SelectionError(f"--identify {target_spec}: {identification.error_line(error)}") from None
    again = f"--identify {Path(path).resolve()}:{name}" + (
        f" --identify-protocol {protocol}" if protocol != "single" else "") + (
        f" --identify-apply {apply_name}" if apply_name else "") + (f" --identify-expect {shlex.quote(expect)}" if expect else "")
    registry.register(replace(identification.identified_record(
        found, identified_name, identification.build_identified(target, protocol), protocol=protocol,
        apply=apply, source=f"identified from its outputs: {target_spec}"), origin=again))
    return {identified_name: report}


def register_model(target_spec: str) -> str:
    """``--model FILE.py:NAME``: register the record of a user's causal LM (a class built without
    arguments, a factory, or an instance copied for each spec), every model relation declared to
    hold but what its design breaks on purpose (transformers' documented rope types). The file may
    give ``MODEL_TRAITS = {...}`` (:class:`~posenc.harness.catalogue.records.ModelTraits` fields) for what the
    model cannot say of itself, and ``MODEL_CLAIMS = {"MODEL-2": posenc.refuted("why"), ...}`` for
    relations its design breaks. Returns the record's name."""
    import copy

    from ..catalogue.declarations import model_claims_for
    from ..whole_models.models import adapt, traits_of, transformers_designs
    from ..catalogue.records import refuted

    path, _, name = target_spec.rpartition(":")
    record_name = f"model_{name}"
    if record_name in {r.name for r in registry.records()}:
        return record_name  # registered by an earlier configure of this process
    try:
        module = _load_file(path, "user_model")
        target = getattr(module, name)
        if not isinstance(target, torch.nn.Module) and not callable(target):
            raise SelectionError(f"--model {target_spec}: {name} is not a model (type {type(target).__name__}); give "
                                 "a model class, a factory that returns a torch.nn.Module, or an nn.Module instance")
        make = (lambda: copy.deepcopy(target)) if isinstance(target, torch.nn.Module) else target
        probe = make()
        if not isinstance(probe, torch.nn.Module):
            raise SelectionError(f"--model {target_spec}: {name}() returned type {type(probe).__name__}, not a "
                                 "torch.nn.Module")
        traits = traits_of(probe, **getattr(module, "MODEL_TRAITS", {}))
        designs = transformers_designs(probe, traits)
        declared = {**{claim: refuted(why, specs=specs) for claim, (why, specs) in designs.items()},
                    **_pictures_unseen(probe, traits), **getattr(module, "MODEL_CLAIMS", {})}
        claims = model_claims_for(traits, declared)
    except SelectionError:
        raise
    except Exception as error:  # noqa: BLE001 - one line, like a plug-in error
        raise SelectionError(f"--model {target_spec}: {type(error).__name__}: {error}") from None

    def build(config):
        return adapt(make().to(device=config.device, dtype=config.dtype), traits)

    again = f"--model {Path(path).resolve()}:{name}"
    registry.register(EncoderRecord(name=record_name, build=build, kind="model", source=target_spec,
                                    description=f"--model {target_spec}: {traits.library}", origin=again,
                                    model=traits, claims=claims))
    return record_name


def _pictures_unseen(model: torch.nn.Module, traits) -> dict:
    """A model with a vision tower (``config.vision_config``) is judged through its text by ``--model``:
    the VLM relations, which need its pictures, read n/a saying where they do run."""
    from ..catalogue.claims import VLM_CLAIMS
    from ..catalogue.records import not_applicable

    from ..whole_models.models import _rope
    from ..whole_models.vision_models import HFVisionLanguageLM

    config = getattr(model, "config", None)
    if traits.vision or getattr(config, "vision_config", None) is None:
        return {}
    if not _rope(config).get("mrope_section"):
        why = "its text's positions are one id per token, no M-RoPE (the VLM relations judge M-RoPE ids)"
    else:
        try:
            HFVisionLanguageLM(model, traits)
            why = ("--model judges this model's text; its pictures' M-RoPE ids are judged by a record that wraps "
                   "it in HFVisionLanguageLM (the Qwen2-VL family's call), as posenc.ecosystem's vlm_* do: "
                   "docs/findings/multiaxis.md")
        except Exception as error:  # noqa: BLE001 - what it lacks is the reason
            why = (f"--model judges this model's text; its M-RoPE ids are built by a call no adapter here makes "
                   f"(HFVisionLanguageLM: {type(error).__name__}: {str(error).partition(chr(10))[0][:80]})")
    return dict.fromkeys(VLM_CLAIMS, not_applicable(why))


def select(settings: Settings, identify_timeout: float | None = None) -> Selection:
    """The records the run judges; ``identify_timeout``: :func:`probe_timeout`, for ``--identify``."""
    try:
        registry.check_registered()
    except ValueError as error:
        raise SelectionError(str(error)) from None
    load_plugins(settings.plugins)
    identified = register_identified(settings, identify_timeout) if settings.identify else {}
    if settings.model:
        register_model(settings.model)
    everything = registry.records()
    names = [r.name for r in everything]
    unknown = [n for n in settings.encoders if not fnmatch.filter(names, n)]
    if unknown:
        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        raise SelectionError(f"--encoders: no encoder matches {', '.join(unknown)}; registered: {shown} "
                             "(pytest specs --collect-only -q lists every spec and encoder)")
    chosen = [r for r in everything
              if not settings.encoders or any(fnmatch.fnmatchcase(r.name, p) for p in settings.encoders)]
    return Selection(chosen, identified)

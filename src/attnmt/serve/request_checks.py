"""The checks of the HTTP API's request bodies that span several fields (pydantic model
validators) or that a field's type cannot say: text not blank, text or audio, a prefix, tag or
constraints for each text. attnmt.serve.schemas builds the request models with them."""

from typing import Any, Optional


def not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("text must not be empty or only whitespace")
    return text


def text_kind(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "list"
    return None


def sampling_draws_one(request):
    if request.sampling is not None and (request.beam not in (None, 1) or request.n_best != 1):
        raise ValueError("sampling draws one translation per sentence: it takes no beam or n_best above 1")
    if request.sampling is not None and request.audio is not None:
        raise ValueError("sampling draws translations of text: a speech model's audio is searched")
    return request


def text_or_audio(request):
    if (request.text is None) == (request.audio is None):
        raise ValueError("give text (translation models) or audio (speech models), one of them")
    return request


def one_for_each_text(request, field: str, what: str):
    """``field`` of the request is a string for a string ``text``, a list as long for a list."""
    value = getattr(request, field)
    if value is None:
        return request
    if request.text is None:
        raise ValueError(f"{field} goes with text: a speech model's audio has no {what}")
    if isinstance(request.text, str) != isinstance(value, str):
        raise ValueError(f"text and {field} go together: two strings, or two lists of the same length")
    if not isinstance(request.text, str) and len(request.text) != len(value):
        raise ValueError(f"text has {len(request.text)} sentences and {field} {len(value)}: one {what} for each text")
    return request


def tag_for_each_text(request):
    """A tag goes with text (not audio): one for every text, or a list of them (null: none) as long
    as a list of texts."""
    if request.tag is None:
        return request
    if request.text is None:
        raise ValueError("tag goes with text: a speech model's audio has no tags")
    if isinstance(request.tag, list):
        if not isinstance(request.text, list):
            raise ValueError("a list of tags goes with a list of texts: give one tag for a single text")
        if len(request.tag) != len(request.text):
            raise ValueError(
                f"text has {len(request.text)} sentences and tag {len(request.tag)}: one tag (or null) "
                "for each text, or one tag for all"
            )
    return request


def translation_for_each_text(request):
    return one_for_each_text(request, "translation", "translation")


def prefix_for_each_text(request):
    return one_for_each_text(request, "prefix", "prefix")


def constraints_for_each_text(request):
    """A list of phrases for a string text, a list of such lists for a list of texts; not with
    audio nor sampling."""
    value = request.constraints
    if value is None:
        return request
    if request.text is None:
        raise ValueError("constraints go with text: a speech model's audio has no words to constrain")
    if request.sampling is not None:
        raise ValueError("sampling draws translations as the model writes them: it takes no constraints")
    nested = bool(value) and not isinstance(value[0], str)
    if isinstance(request.text, str) == nested:
        raise ValueError(
            "text and constraints go together: a string and a list of phrases, or a list of texts "
            "and a list as long of lists of phrases"
        )
    if nested and len(value) != len(request.text):
        raise ValueError(
            f"text has {len(request.text)} sentences and constraints {len(value)}: a list of phrases for each text"
        )
    return request

"""The search_engine call parser (stage 06, Distill step): golden parses and malformed calls."""

from __future__ import annotations

import json

import pytest

from medpref.llm.types import Completion
from medpref.medqa.distill import interpret
from medpref.medqa.toolcall import (
    SEARCH_ENGINE_TOOL,
    ToolCall,
    ToolCallError,
    example_queries,
    parse_native_calls,
    parse_text_call,
)


@pytest.mark.parametrize("text, query, form", [
    ('search_engine(query="metformin kidney contraindications")',
     "metformin kidney contraindications", "text"),
    ("  search_engine( query = 'lisinopril pregnancy' )  ", "lisinopril pregnancy", "text"),
    ('search_engine(query="warfarin \\"Coumadin\\" aspirin")', 'warfarin "Coumadin" aspirin',
     "text"),
    # later lines are ignored: a local model writes on until its token limit
    ('search_engine(query="sertraline dose")\nPatient: thanks doctor', "sertraline dose", "text"),
    ('{"name": "search_engine", "arguments": {"query": "amoxicillin rash"}}',
     "amoxicillin rash", "json"),
    ('{"name": "search_engine", "arguments": "{\\"query\\": \\"ibuprofen ulcer\\"}"}\nmore',
     "ibuprofen ulcer", "json"),
])
def test_well_formed_calls(text, query, form):
    assert parse_text_call(text) == ToolCall(query, form)


@pytest.mark.parametrize("text, query, form, argument", [
    # RagPULSE Table 1's own outputs, verbatim: bare keywords inside the parentheses
    ("search_engine(2017 College entrance examination ticket size.)",
     "2017 College entrance examination ticket size.", "text", "positional"),
    ("search_engine(The cost of studying in Japan high school.)",
     "The cost of studying in Japan high school.", "text", "positional"),
    ("search_engine(Guangzhou Typhoon Forecast.)", "Guangzhou Typhoon Forecast.", "text",
     "positional"),
    # bare keywords with their own parentheses
    ("search_engine(ibuprofen (Advil) dose)", "ibuprofen (Advil) dose", "text", "positional"),
    ('search_engine("metformin dose")', "metformin dose", "text", "positional"),
    # the paper's schema names the argument `input`
    ('search_engine(input="metformin")', "metformin", "text", "input"),
    ('{"name": "search_engine", "arguments": {"input": "amoxicillin rash"}}',
     "amoxicillin rash", "json", "input"),
    ('search_engine(query="metformin")', "metformin", "text", "query"),
])
def test_the_papers_call_forms_parse(text, query, form, argument):
    assert parse_text_call(text) == ToolCall(query, form, argument)


@pytest.mark.parametrize("text, reason", [
    ("", "empty answer"),
    ("   \n  ", "empty answer"),
    ("The correct answer is no.", "no search_engine(...) call on the first line"),
    ('Search_engine(query="metformin")', "tool name must be exactly"),
    ('Reply: search_engine(query="metformin")', "text before the call"),
    ('search_engine(query="metformin") and then I answer', "text after the call"),
    ('search_engine(query="a") search_engine(query="b")', "text after the call"),
    ('search_engine(query="metformin dose', "unclosed call"),
    ('search_engine(query="glucophage 500mg, 2 times a day, 100mg, 100', "unclosed call"),
    ("search_engine(query=metformin)", "malformed arguments"),
    ('search_engine(keywords="metformin")', "unknown argument"),
    ("search_engine()", "empty query"),
    ("search_engine(metformin) and more", "text after the call"),
    ('search_engine(query="")', "empty query"),
    ('search_engine(query="   ")', "empty query"),
    ('I will search.\nsearch_engine(query="metformin")', "not on the first line"),
    ('{"name": "search_engine", "arguments": {"query": "x"}', "invalid JSON"),
    ('{"name": "search", "arguments": {"query": "x"}}', "tool name must be exactly"),
    ('{"name": "search_engine", "arguments": {"q": "x"}}', "missing argument 'input'"),
    ('{"name": "search_engine", "arguments": {"query": 3}}', "must be a string"),
    ('{"name": "search_engine"}', "no 'arguments' object"),
    ('{"name": "search_engine", "arguments": "{bad"}', "arguments are not valid JSON"),
    ('{"name": "search_engine", "arguments": {"query": "x"}} done', "text after the JSON"),
    ('["search_engine", "x"]', "no search_engine"),
])
def test_malformed_calls_say_why(text, reason):
    with pytest.raises(ToolCallError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_text_call(text)


def test_native_calls():
    call = [{"name": "search_engine", "arguments": json.dumps({"query": "metformin eGFR"})}]
    assert parse_native_calls(call) == ToolCall("metformin eGFR", "native")
    paper = [{"name": "search_engine", "arguments": json.dumps({"input": "metformin eGFR"})}]
    assert parse_native_calls(paper) == ToolCall("metformin eGFR", "native", "input")
    with pytest.raises(ToolCallError, match="no tool call"):
        parse_native_calls(None)
    with pytest.raises(ToolCallError, match=r"more than one tool call \(2 calls\)"):
        parse_native_calls(call * 2)
    with pytest.raises(ToolCallError, match="tool name"):
        parse_native_calls([{"name": "web_search", "arguments": "{}"}])


def test_interpret_uses_prefix_and_failed_calls():
    assert interpret(Completion(text='metformin dose")'), "text",
                     prefix='search_engine(query="').query == "metformin dose"
    with pytest.raises(ToolCallError, match="model call failed"):
        interpret(Completion(text="", error="timeout"), "text")
    native = Completion(text="", tool_calls=[{"name": "search_engine",
                                              "arguments": '{"query": "x"}'}])
    assert interpret(native, "native").form == "native"
    # a native-mode answer in plain text is not a tool call, even if it looks like one
    with pytest.raises(ToolCallError, match="no tool call"):
        interpret(Completion(text='search_engine(query="x")'), "native")


def test_schema_and_prompt_examples():
    fn = SEARCH_ENGINE_TOOL["function"]
    assert fn["name"] == "search_engine" and fn["parameters"]["required"] == ["input"]
    from medpref.prompts import load_prompt

    tpl = load_prompt("medqa_distill_text")
    examples = example_queries(tpl.system + tpl.user)
    assert "sumatriptan maximum daily dose" in examples
    # every example written in the prompt obeys the format it asks for
    for q in examples:
        assert parse_text_call(f'search_engine(query="{q}")').query == q


def test_reason_is_a_fixed_phrase_and_the_message_adds_the_detail():
    with pytest.raises(ToolCallError) as err:
        parse_text_call('Search_engine(query="sumatriptan maximum daily dose")\n\nPatient: ...')
    assert err.value.reason == "tool name must be exactly 'search_engine'"
    assert str(err.value) == ("tool name must be exactly 'search_engine' "
                              "(found 'Search_engine')")
    with pytest.raises(ToolCallError) as err:
        parse_text_call('search_engine(query="amoxil amoxil amoxil amox')
    assert err.value.reason == "unclosed call"


def test_distilled_query_falls_back_and_flags_copied_examples():
    from medpref.contracts import MedicineQAItem, Turn
    from medpref.llm.client import LLMClient
    from medpref.llm.scripted import ScriptedBackend
    from medpref.llm.types import GenerationParams
    from medpref.medqa.distill import distilled_query

    item = MedicineQAItem(id="m-1", history=[Turn(role="patient", text="I take Zestril.")],
                          question="Can I get pregnant?", gold_medicine="lisinopril",
                          gold_attributes=["pregnancy"])
    client = LLMClient("policy", ScriptedBackend(lambda r: ""), GenerationParams())
    examples = {"sumatriptan maximum daily dose"}
    copied = distilled_query(item, Completion('Search_engine(query="sumatriptan maximum daily '
                                              'dose")'), client, "text", "", "last_question",
                             8, examples)
    assert not copied.well_formed and copied.copied_example
    assert copied.reason == "tool name must be exactly 'search_engine'"
    assert (copied.query, copied.query_used, copied.fallback) == (None, "Can I get pregnant?",
                                                                  "last_question")
    good = distilled_query(item, Completion('search_engine(query="lisinopril pregnancy")'),
                           client, "text", "", "history", 8, examples)
    assert good.well_formed and not good.copied_example and good.fallback is None
    assert good.query_used == "lisinopril pregnancy"
    hist = distilled_query(item, Completion("No."), client, "text", "", "history", 8, examples)
    assert hist.query_used == "Patient: I take Zestril.\nPatient: Can I get pregnant?"

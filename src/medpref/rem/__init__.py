"""The Rule Evaluation Model (REM): scoring a dialogue state against each rule."""

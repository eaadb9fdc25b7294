"""Pure scoring formulas of REM-based preference annotation (PLPF Eqs. 1-4) and pair selection."""

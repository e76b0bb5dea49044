"""The noise a comparison assumes, from the records' own history to each row's levels:
which records are read (history_scope, history_records), each device kind's fit (history),
how its rows differ (spread), the levels one comparison takes (noise), and a row's noise
within that comparison (row_noise)."""

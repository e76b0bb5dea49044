"""What a compiled step costs: FLOPs from its optimized HLO, utilisation, memory."""

"""Building blocks shared by every model family."""

"""One run as a whole: its options, the encoders it selects, its session and header, the benchmark gates, its end and what it prints."""

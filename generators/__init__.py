"""dump.json -> replayable cases: loading, real data, random data (Hypothesis strategies)."""

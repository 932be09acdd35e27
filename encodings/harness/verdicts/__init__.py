"""The verdicts and where they go: the claims × encoders matrix, the journal, the written reports and the text width they fit."""

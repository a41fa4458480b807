"""Files the tool reads from untrusted hands (infile: snapshots, reports, configs; bounded, one-line errors)
and files it writes (outfile: atomic, never through another user's link)."""

"""Study 1: IP aliases (seeds 000, 001, 003). The study is nslab.experiments.alias.study:AliasStudy."""

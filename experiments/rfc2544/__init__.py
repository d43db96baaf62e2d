"""Study 3: RFC 2544, Linux bridge vs Linux router (seed 004). The study is nslab.experiments.rfc2544.study:Rfc2544Study."""

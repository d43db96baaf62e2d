"""Study 2: ECMP hashing (seed 002). The study is nslab.experiments.ecmp.study:EcmpStudy."""

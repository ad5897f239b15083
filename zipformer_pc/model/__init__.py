"""The streaming Zipformer transducer: encoder (zipformer, subsampling, scaling),
predictor and joiner heads, and the transducer losses."""

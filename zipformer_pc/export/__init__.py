"""Export of a trained checkpoint to ONNX for the streaming runtime and sherpa-onnx."""

"""Integer kernels: TensorFlow Lite's builtins (domain "tflite", int8/uint8 with TFLite's rounding, and
their float forms) and quantized ONNX's QOperator ops, all on `runtime.quant_arith`.

Imported by the kernel registry's loader like any kernel module; importing this package imports
every module below, so each registers its kernels.
"""

from runtime.kernels.quantized import (  # noqa: F401
    qlinear_conv,
    qlinear_matmul,
    qlinear_ops,
    quantize,
    tflite_conv,
    tflite_dense,
    tflite_elementwise,
    tflite_lstm,
    tflite_pool,
    tflite_shape,
    tflite_softmax,
    tflite_svdf,
)

"""CANN's published ONNX operator support table ("支持ONNX算子清单"), as data, for an ATC pre-flight.

What this is
    A transcription of Huawei CANN's "支持ONNX算子清单" (Supported ONNX Operators) for ATC
    (``atc --framework=5``).  CANN's overview page for that list says: the specification applies
    only to network models defined with native ONNX IR; the supported ONNX version is 1.12.0,
    the ONNX Runtime version 1.14.0, the opset "详见各算子支持的ONNX版本描述" (see each operator's
    own "supported ONNX version" line), and "ONNX算子清单当前仅支持Atlas 推理系列产品" (the ONNX
    operator list currently applies to Atlas inference series products only, i.e. Ascend 310P).

CANN version and where it comes from (read 2026-12-04 from stored copies of these pages; the
live site was not fetched)
    * Operator set: the CANN 8.0.0 commercial index page (160 entries, all keys of OPERATORS)
      https://www.hiascend.com/doc_center/source/zh/canncommercial/800/apiref/aolapi/operatorlist_00176.html
    * Overview text: .../canncommercial/80RC22/apiref/operatorlist/operatorlist_0004.html (8.0.RC2.2)
      and .../canncommercial/900/API/aolapi/operatorlist_00177.html (same wording).
    * Per-operator pages: https://www.hiascend.com/document/detail/zh/canncommercial/<ver>/apiref/aolapi/
      atlasoxol_09_<page>.html (9.x: .../<ver>/API/aolapi/...; English: /document/detail/en/...).
      Each entry's "src" names the edition whose page was read: "800" = CANN 8.0.0 commercial
      (preferred); where no 8.0.0 copy was reachable another edition was used: "80RC2" / "80RC22" /
      "80RC3" (8.0.RC2, 8.0.RC2.2, 8.0.RC3),
      "800a" (8.0.0.alpha community), "81RC1" / "82RC1" / "83RC1" (8.1-8.3 RC), "850" (8.5.0),
      "900" (commercial 9.0.0, canncommercial/latest), "910b3" (community 9.1.0.beta3).  Pages
      change between editions (Pow, Min, Relu, Gather, Expand and Unsqueeze gain dtypes in later
      editions; noted per entry where both were seen), so a non-"800" entry may differ from 8.0.0.
      "page" is the atlasoxol_09_<page> number (stable across 8.0.RC3 .. 9.0.0).

OPSET_RANGE
    (9, 18): the ATC guide ("ONNX算子规格", CANN 7.0.0, .../canncommercial/700/inferapplicationdev/
    atctool/atlasatc_16_0201.html) says "当前支持的ONNX版本为1.12.0、Opset版本为v9~v18".  The 8.0.0
    overview defers to each operator instead; every per-operator line read tops out at v18 and most
    start at v8 (CANN 5.0.4's ATC guide said v9~v13).  Per-operator ranges are in "opsets" and
    are narrower for several ops (Clip v11-16, Unsqueeze v8-12, Constant v8-13, ReduceMean v8-16,
    Sub v8-15, GatherElements v11-18 ...).  An op at an opset outside its "opsets" is not listed.

Shape of an entry
    OPERATORS[op_type] = {"dtypes": {input_index or "*": tuple of dtype names or None},
                          "opsets": (min, max), "page": "0092", "src": "800", "note": "..."}
    Keys are ONNX op_type spellings; where CANN's index spells it differently (Argmax, LogSoftMax,
    Cumsum) the note says so.  Lookup for input i: dtypes[i], else dtypes["*"]; an index present
    in neither is not constrained by the table.  ``None`` means the table gives no dtype list for
    it (or, where the note says "not transcribed", that the transcription did not read the page).
    Dtype names follow ONNX/numpy: the docs' "float" -> "float32", "double" -> "float64";
    quantized names (qint8 ...) are kept as written.  "opsets" is the page's "支持的ONNX版本"
    line; it is absent when the page was not read.

What the table does NOT cover
    * Attribute constraints are only summarised in "note" (e.g. Gemm alpha/beta, Argmax
      select_last_index, AveragePool kernel limits); no attribute is machine-checked here.
    * Output dtypes, shape/rank limits (only in notes, e.g. MatMul 1-6 dims, Slice rank != 1),
      data formats, dynamic-shape rules, and ATC's --precision_mode interplay (several pages say an
      op does not accept fp32 input under --precision_mode=must_keep_origin_dtype).
    * Ops only reachable through ATC's fusion/custom-op plugins, and products other than Atlas
      inference series (310P).  It does not prove ATC will succeed; it only flags what CANN's own
      table does not list.
    * Many index entries were not transcribed (see their notes); for those only the
      presence of the op in the 8.0.0 list is known.
"""
from __future__ import annotations

CANN_VERSION = "8.0.0"
SOURCE = ("https://www.hiascend.com/doc_center/source/zh/canncommercial/800/apiref/aolapi/operatorlist_00176.html "
          "(CANN 8.0.0 '支持ONNX算子清单'; per-op pages atlasoxol_09_<page>.html, edition per entry 'src')")
READ_ON = "2026-12-04"
OPSET_RANGE = (9, 18)
ONNX_VERSION = "1.12.0"
ONNX_RUNTIME_VERSION = "1.14.0"

F16 = "float16"
F32 = "float32"
F64 = "float64"
_FLOATS = (F16, F32)
_NT = "listed in the 8.0.0 index; per-op page not transcribed (dtypes/opsets unknown)"
_IDX = ("int32", "int64")
_ALLNUM = (F16, F32, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _nt(note: str = _NT) -> dict:
    return {"dtypes": {"*": None}, "note": note}


OPERATORS: dict = {
    # ---- entries transcribed from the per-operator pages ----
    "Abs": {"dtypes": {"*": (F32, F16, "int8", "int16", "int32", "int64")}, "opsets": (8, 18), "page": "0001", "src": "80RC22"},
    "Add": {"dtypes": {"*": ("int8", "int16", "int32", "int64", "uint8", F32, F16, F64)}, "opsets": (8, 18), "page": "0006",
            "src": "900", "note": "B must have the same dtype as A (same list on 8.0.RC3 and 8.1.RC1 pages)"},
    "ArgMax": {"dtypes": {0: _FLOATS}, "opsets": (8, 18), "page": "0010", "src": "800",
               "note": "index spelling 'Argmax'; output int64; attrs axis, keep_dim. 8.1+/9.x add int32 input and say "
                       "select_last_index supports only 0"},
    "Atanh": {"dtypes": {"*": (F16, F32, F64)}, "opsets": (9, 18), "page": "0021", "src": "900"},
    "Cast": {"dtypes": {0: (F32, F16, "int8", "int32", "int64", "uint8", "bool")}, "opsets": (8, 18), "page": "0031", "src": "80RC3",
             "note": "attr 'to' (required); output dtypes listed as bool, float16, float, int8, int16, int32, uint8 '等' (etc.)"},
    "Clip": {"dtypes": {0: (F16, F32, "int32")}, "opsets": (11, 16), "page": "0034", "src": "80RC3",
             "note": "min/max optional scalars (dtype not stated), not both missing; opset 17/18 NOT listed (same on 8.5.0/9.0.0)"},
    "Concat": {"dtypes": {"*": _ALLNUM}, "opsets": (8, 18), "page": "0037", "src": "900",
               "note": "all inputs same dtype; no bool listed; attr axis in [-r, r-1] (same list on 8.5.0 en)"},
    "Constant": {"dtypes": {"*": (F32, F16, "bfloat16", "int4", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                  "uint64", "bool", F64)}, "opsets": (8, 13), "page": "0038", "src": "800a",
                 "note": "no inputs: the dtype list is for attr 'value' / the output; sparse_value not supported; only v8-v13 "
                         "listed (same on 8.0.RC2/8.0.RC3/8.5.0)"},
    "ConstantOfShape": {"dtypes": {0: ("int64",)}, "opsets": (9, 16), "page": "0039", "src": "80RC2",
                        "note": "input: 1-D int64 shape, all values > 0, 1 <= len <= 8; attr value sets output dtype (default "
                                "float32). Opset line differs by edition: 8.0.RC2 v9-v16, 8.5.0 en v8-v16, 8.0.RC1 v9-v18"},
    "Div": {"dtypes": {"*": (F16, F32, F64, "int32", "int64")}, "opsets": (8, 18), "page": "0049", "src": "900",
            "note": "B same dtype/shape as A; 8.0.0.alpha page lists the same dtypes"},
    "Equal": {"dtypes": {"*": (F16, F32, F64, "int32", "int8", "uint8", "bool", "int64", "int16", "uint16", "uint32", "uint64")},
              "opsets": (8, 18), "page": "0055", "src": "800",
              "note": "B same dtype/shape as A; output bool (8.0.RC3 listed only float16, float, double)"},
    "Erf": {"dtypes": {"*": _FLOATS}, "opsets": (9, 18), "page": "0056", "src": "80RC3", "note": "same on 8.1.RC1"},
    "Exp": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0057", "src": "900",
            "note": "read from the English 9.0.0/9.1.0 pages"},
    "Expand": {"dtypes": {0: (F16, F32, "bool", "int64"), 1: ("int64",)}, "opsets": (8, 18), "page": "0058", "src": "800",
               "note": "input 'shape' must be a const (not a placeholder); use onnx-simplifier. 8.3+/9.0.0 add int32, int8, uint8"},
    "Floor": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0061", "src": "800"},
    "Gather": {"dtypes": {0: _FLOATS, 1: _IDX}, "opsets": (8, 18), "page": "0062", "src": "80RC3",
               "note": "negative indices not supported; attr axis in [-r, r-1]. 8.5.0 en lists data float16, float, int32, int64, "
                       "int8, int16, uint8, uint16, uint32, uint64, bool"},
    "GatherElements": {"dtypes": {0: (F16, F32, "int32"), 1: _IDX}, "opsets": (11, 18), "page": "0063", "src": "800a",
                       "note": "indices same rank as input; attr axis default 0 (same on 8.5.0)"},
    "Gemm": {"dtypes": {0: _FLOATS, 1: _FLOATS}, "opsets": (8, 18), "page": "0065", "src": "80RC3",
             "note": "2-D A, B; C (bias) and alpha/beta: '该参数暂不支持' (not supported) on 8.0.RC3/8.0.0.alpha/8.1.RC1/9.0.0 "
                     "(later community pages describe them); opset v8-v10 do not accept float input with "
                     "--precision_mode=must_keep_origin_dtype"},
    "Greater": {"dtypes": {"*": (F16, F32, "int32", "int8", "uint8")}, "opsets": (8, 18), "page": "0069", "src": "850",
                "note": "output bool"},
    "GreaterOrEqual": {"dtypes": {"*": (F16, F32, "int32")}, "opsets": (12, 18), "page": "0070", "src": "800", "note": "output bool"},
    "Identity": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0077", "src": "80RC3", "note": "same on 8.2.RC1/8.5.0/9.0.0"},
    "Less": {"dtypes": {"*": (F16, F32, "int32")}, "opsets": (8, 18), "page": "0079", "src": "850", "note": "output bool"},
    "LessOrEqual": {"dtypes": {"*": _FLOATS}, "opsets": (12, 18), "page": "0080", "src": "850", "note": "output bool"},
    "Log": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0085", "src": "800"},
    "LogSoftmax": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0086", "src": "800",
                   "note": "index spelling 'LogSoftMax'; float16 is NOT supported at opset 18; attr axis in [-r, r-1]"},
    "MatMul": {"dtypes": {"*": (F16,)}, "opsets": (8, 18), "page": "0092", "src": "800",
               "note": "only float16 listed (both inputs); only 1-6 dim inputs (same on 8.0.RC3 and 9.0.0)"},
    "Max": {"dtypes": {"*": (F16, F32, "int32")}, "opsets": (8, 18), "page": "0093", "src": "80RC3",
            "note": "variadic data_0 list, same dtype; same on 9.0.0"},
    "Min": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0099", "src": "800", "note": "8.5.0/9.0.0 add int32"},
    "Mod": {"dtypes": {"*": (F16, F32, "int32", "int8", "uint8")}, "opsets": (10, 18), "page": "0100", "src": "82RC1",
            "note": "remainder has the divisor's sign (fmod=0 semantics); CANN 5.0.4 said fmod=0 is unsupported for float inputs"},
    "Mul": {"dtypes": {"*": (F16, F32, "int8", "int32")}, "opsets": (8, 18), "page": "0102", "src": "80RC3"},
    "Neg": {"dtypes": {"*": (F16, F32, "int32")}, "opsets": (8, 18), "page": "0104", "src": "800"},
    "Not": {"dtypes": {"*": ("bool",)}, "opsets": (8, 18), "page": "0108", "src": "800"},
    "Pow": {"dtypes": {"*": (F16, F32, F64, "int32")}, "opsets": (8, 18), "page": "0112", "src": "800",
            "note": "Y same dtype as X; 8.3+/9.0.0 add int8, uint8"},
    "Reciprocal": {"dtypes": {"*": (F16, F32, F64)}, "opsets": (8, 18), "page": "0118", "src": "800"},
    "ReduceMean": {"dtypes": {"*": _FLOATS}, "opsets": (8, 16), "page": "0123", "src": "900",
                   "note": "only v8-v16 listed (same 8.2.RC1-9.0.0); attrs axes, keepdims; empty axes does NOT reduce all "
                           "dims - give all axes explicitly"},
    "ReduceSum": {"dtypes": {0: _FLOATS}, "opsets": (8, 18), "page": "0127", "src": "850",
                  "note": "axes listed as an attribute; empty axes does NOT reduce all dims - give all axes explicitly"},
    "ReduceMax": {"dtypes": {0: (F16, F32, "int8", "int32", "int64", F64)}, "opsets": (8, 18), "page": "0128", "src": "910b3",
                  "note": "axes may be empty only for float16/float/int32 inputs, and then does NOT reduce all dims"},
    "Relu": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0129", "src": "80RC3",
             "note": "8.1.RC1 lists int32, int8, float16, float"},
    "Reshape": {"dtypes": {0: (F16, "int8", "int16", "uint16", "uint8", "int32", "int64", "uint32", "uint64", "bool", F64),
                           1: ("int64",)}, "opsets": (8, 18), "page": "0130", "src": "900",
                "note": "data list as printed on 8.5.0 and 9.0.0 (zh+en) OMITS float32 (CANN 6.0.1 listed float) - likely a "
                        "doc omission, treat float32 as a warning; attr allowzero"},
    "Round": {"dtypes": {"*": ("int32", F16, F32, F64)}, "opsets": (8, 18), "page": "0136", "src": "81RC1"},
    "Shape": {"dtypes": {"*": (F32, F16, "int8", "int16", "uint16", "uint8", "int32", "int64", "uint32", "uint64", "bool", F64)},
              "opsets": (8, 18), "page": "0143", "src": "80RC3", "note": "output int32 or int64; same on 8.2.RC1/8.5.0/9.0.0"},
    "Sigmoid": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0145", "src": "800"},
    "Slice": {"dtypes": {0: (F16, F32, F64, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"),
                         1: _IDX, 2: _IDX, 3: _IDX, 4: _IDX}, "opsets": (8, 18), "page": "0150", "src": "800",
              "note": "data rank must not be 1; the step of the last axis must be 1"},
    "Softmax": {"dtypes": {"*": (F16, F32, F64)}, "opsets": (8, 18), "page": "0151", "src": "80RC3", "note": "attr axis default -1"},
    "Split": {"dtypes": {0: _ALLNUM, 1: ("int8", "int16", "int32", "int64")}, "opsets": (8, 18), "page": "0156", "src": "80RC3",
              "note": "split (an input from opset 13): each element >= 1 (8.1+ pages say > 1), sum == size of the axis"},
    "Sqrt": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0157", "src": "800", "note": "x < 0 returns NaN"},
    "Squeeze": {"dtypes": {0: (F16, F32, F64, "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "bool")},
                "opsets": (8, 18), "page": "0158", "src": "800a", "note": "axes int32/int64 list (same on 8.5.0)"},
    "Sub": {"dtypes": {"*": (F16, F32, "int32")}, "opsets": (8, 15), "page": "0159", "src": "800",
            "note": "only v8-v15 listed (same on 8.2.RC1/9.0.0)"},
    "Sum": {"dtypes": {"*": ("int8", "int32", "uint8", F16, F32)}, "opsets": (8, 18), "page": "0160", "src": "850",
            "note": "all inputs same dtype"},
    "Tan": {"dtypes": {"*": ("int32", F16, F32)}, "opsets": (8, 18), "page": "0161", "src": "81RC1"},
    "Tanh": {"dtypes": {"*": _FLOATS}, "opsets": (8, 18), "page": "0162", "src": "80RC3", "note": "same on 9.0.0"},
    "Tile": {"dtypes": {0: (F16, F32, F64, "int64", "int32", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "complex64",
                            "complex128", "qint8", "quint8", "qint16", "quint16", "qint32", "bool"), 1: ("int64",)},
             "opsets": (8, 18), "page": "0165", "src": "81RC1", "note": "repeats: 1-D int64 with one element per input dim; "
                                                                         "'仅支持Atlas 推理系列产品' (same on 8.0.RC2)"},
    "Transpose": {"dtypes": {"*": _ALLNUM + ("bool",)}, "opsets": (8, 18), "page": "0167", "src": "80RC3",
                  "note": "attr perm (same on 8.5.0/9.0.0)"},
    "Unsqueeze": {"dtypes": {0: (F16, F32, F64, "uint8", "uint16", "uint32", "int8", "int16", "int32", "int64", "uint64")},
                  "opsets": (8, 12), "page": "0169", "src": "800",
                  "note": "ONLY v8-v12 listed (axes as an attribute; opset-13 Unsqueeze with axes input is not listed, same on "
                          "8.2-9.1); axes must not repeat; 8.2+ add bool"},
    "Where": {"dtypes": {0: ("bool",), 1: (F16, F32, "uint8", "int8", "int32"), 2: (F16, F32, "uint8", "int8", "int32")},
              "opsets": (8, 18), "page": "0170", "src": "850", "note": "Y same dtype as X"},
    # ---- in the 8.0.0 index, page not transcribed ----
    "Acos": _nt(), "Acosh": _nt(), "AdaptiveAvgPool2D": _nt(_NT + "; a CANN custom op name, not ONNX"), "AffineGrid": _nt(),
    "And": _nt(), "ArgMin": _nt(_NT + "; index spelling 'Argmin'"), "AscendAntiQuant": _nt(_NT + "; CANN custom op"),
    "AscendQuant": _nt(_NT + "; CANN custom op"), "Asin": _nt(), "Asinh": _nt(), "Atan": _nt(),
    "AveragePool": _nt(), "BatchNormalization": _nt(), "BatchMultiClassNMS": _nt(_NT + "; CANN custom op"), "BitShift": _nt(),
    "BitwiseAnd": _nt(), "BitwiseNot": _nt(), "BitwiseOr": _nt(), "BitwiseXor": _nt(), "Ceil": _nt(), "Celu": _nt(),
    "Compress": _nt(), "Conv": _nt(), "ConvTranspose": _nt(), "Corr": _nt(_NT + "; CANN custom op"), "Cos": _nt(), "Cosh": _nt(),
    "CumSum": _nt(_NT + "; index spelling 'Cumsum'"), "DeformableConv2D": _nt(_NT + "; CANN custom op"), "DepthToSpace": _nt(),
    "Det": _nt(), "Dropout": _nt(), "DynSeqOuter": _nt(_NT + "; CANN custom op"), "Einsum": _nt(), "Elu": _nt(),
    "EmbeddingBag": _nt(_NT + "; CANN custom op"), "EyeLike": _nt(), "Flatten": _nt(), "GatherND": _nt(),
    "GlobalAveragePool": _nt(), "GlobalLpPool": _nt(), "GlobalMaxPool": _nt(), "GridSample": _nt(), "GRU": _nt(),
    "Hardmax": _nt(), "HardSigmoid": _nt(), "HardSwish": _nt(), "If": _nt(), "InstanceNormalization": _nt(), "IsInf": _nt(),
    "IsNaN": _nt(), "LayerNormalization": _nt(), "LeakyRelu": _nt(), "LpNormalization": _nt(), "LpPool": _nt(), "LRN": _nt(),
    "LSTM": _nt(), "LSTMP": _nt(_NT + "; CANN custom op"), "MaxPool": _nt(), "MaxRoiPool": _nt(), "MaxUnpool": _nt(),
    "Mean": _nt(), "MeanVarianceNormalization": _nt(), "MovingSumWithSigmoid": _nt(_NT + "; CANN custom op"),
    "Multinomial": _nt(), "NonMaxSuppression": _nt(), "NonZero": _nt(), "OneHot": _nt(), "Or": _nt(), "Pad": _nt(),
    "RandomNormal": _nt(), "RandomNormalLike": _nt(), "RandomUniform": _nt(), "RandomUniformLike": _nt(), "Range": _nt(),
    "ReduceL1": _nt(), "ReduceL2": _nt(), "ReduceLogSum": _nt(), "ReduceLogSumExp": _nt(), "ReduceMin": _nt(),
    "ReduceProd": _nt(), "ReduceSumSquare": _nt(), "Resize": _nt(), "ReverseSequence": _nt(), "RoiAlign": _nt(),
    "RoiExtractor": _nt(_NT + "; CANN custom op"), "PRelu": _nt(), "Scatter": _nt(), "ScatterElements": _nt(),
    "ScatterND": _nt(), "Selu": _nt(), "Shrink": _nt(), "Sign": _nt(), "Sin": _nt(), "Sinh": _nt(), "Size": _nt(),
    "SoftmaxCrossEntropyLoss": _nt(), "Softplus": _nt(), "Softsign": _nt(), "SpaceToDepth": _nt(), "TfIdfVectorizer": _nt(),
    "ThresholdedRelu": _nt(), "TopK": _nt(), "Trilu": _nt(), "Xor": _nt(),
}

Defs.vo Defs.glob Defs.v.beautified Defs.required_vo: Defs.v 
Defs.vio: Defs.v 
Defs.vos Defs.vok Defs.required_vos: Defs.v 
Softmax.vo Softmax.glob Softmax.v.beautified Softmax.required_vo: Softmax.v Defs.vo
Softmax.vio: Softmax.v Defs.vio
Softmax.vos Softmax.vok Softmax.required_vos: Softmax.v Defs.vos
LemmaA1.vo LemmaA1.glob LemmaA1.v.beautified LemmaA1.required_vo: LemmaA1.v Defs.vo Softmax.vo
LemmaA1.vio: LemmaA1.v Defs.vio Softmax.vio
LemmaA1.vos LemmaA1.vok LemmaA1.required_vos: LemmaA1.v Defs.vos Softmax.vos
Thm41.vo Thm41.glob Thm41.v.beautified Thm41.required_vo: Thm41.v Defs.vo Softmax.vo
Thm41.vio: Thm41.v Defs.vio Softmax.vio
Thm41.vos Thm41.vok Thm41.required_vos: Thm41.v Defs.vos Softmax.vos
Prop71.vo Prop71.glob Prop71.v.beautified Prop71.required_vo: Prop71.v Defs.vo
Prop71.vio: Prop71.v Defs.vio
Prop71.vos Prop71.vok Prop71.required_vos: Prop71.v Defs.vos
Transformer.vo Transformer.glob Transformer.v.beautified Transformer.required_vo: Transformer.v Defs.vo Softmax.vo
Transformer.vio: Transformer.v Defs.vio Softmax.vio
Transformer.vos Transformer.vok Transformer.required_vos: Transformer.v Defs.vos Softmax.vos
Skeleton.vo Skeleton.glob Skeleton.v.beautified Skeleton.required_vo: Skeleton.v Defs.vo
Skeleton.vio: Skeleton.v Defs.vio
Skeleton.vos Skeleton.vok Skeleton.required_vos: Skeleton.v Defs.vos

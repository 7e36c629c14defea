"""Evaluate trained or published weights, under their own padding or any other.

    python eval.py weights=outputs/<run>/last.pt data=fashion_mnist
    python eval.py weights=torchvision:ResNet50_Weights.IMAGENET1K_V1 data.root=/data/imagenet
    python eval.py weights=timm:resnet50.a1_in1k data.root=/data/imagenet +padding=asymmetric
    python eval.py weights=keras:/models/resnet50v2.h5 data.root=/data/imagenet crops=10
    torchrun --nproc_per_node=8 eval.py weights=... data.root=/data/imagenet

Every run appends one row to results/eval.jsonl (results_file=...). configs/eval.yaml
lists every option. The app is resnet/cli/eval.py, installed as ``resnet-eval``.
"""

from resnet.cli.eval import main

if __name__ == "__main__":
    main()

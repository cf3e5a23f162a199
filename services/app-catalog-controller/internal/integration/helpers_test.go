package integration

import corev1 "k8s.io/api/core/v1"

type corev1Namespace = corev1.Namespace

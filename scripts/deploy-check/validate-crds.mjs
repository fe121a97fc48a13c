// scripts/deploy-check/validate-crds.mjs — validates the custom resources the chart renders
// (PodMonitor, PrometheusRule, ScaledObject) against their CRDs' OpenAPI schemas, as
// bundled in the @kubernetes-models packages that package.json pins.
//
//   node validate-crds.mjs MODULES_DIR < resources.json
//
// stdin: a JSON array of {source, resource}. Prints one line per resource; exits 1 if any
// fails or is of a kind it has no schema for. The schemas, like the API server's, let
// unknown fields through (the server prunes them): scripts/deploy-check/validate.py
// checks the field names the chart writes on its own.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: node validate-crds.mjs MODULES_DIR < resources.json");
  process.exit(2);
}
const load = (file) => import(pathToFileURL(join(modules, file)).href);
const monitoring = await load("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js");
const keda = await load("@kubernetes-models/keda/keda.sh/v1alpha1/index.js");

const kinds = {
  "monitoring.coreos.com/v1 PodMonitor": monitoring.PodMonitor,
  "monitoring.coreos.com/v1 PrometheusRule": monitoring.PrometheusRule,
  "keda.sh/v1alpha1 ScaledObject": keda.ScaledObject,
};

let failed = 0;
for (const { source, resource } of JSON.parse(readFileSync(0, "utf8"))) {
  const kind = `${resource.apiVersion} ${resource.kind}`;
  const name = `${source}: ${kind} ${resource.metadata?.name}`;
  const Model = kinds[kind];
  if (!Model) {
    console.log(`FAIL ${name}: no CRD schema for this kind here`);
    failed++;
    continue;
  }
  try {
    new Model(resource).validate();
    console.log(`ok   ${name} (CRD schema)`);
  } catch (error) {
    console.log(`FAIL ${name}: ${error.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);

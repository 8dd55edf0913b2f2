// Validates the Worker's recorded answers against src/api/openapi.json with ajv
// (JSON Schema 2020-12, OpenAPI 3.1's dialect). Used by the e2e suite
// (loadtest/src/runtime/openapi.rs): node scripts/openapi-answers.mjs <document> <answers>
// where answers is [{"method", "path" (a route template), "status", "body"}].
// Prints {"answers", "routes", "failures": [{"method", "path", "status", "count",
// "error"}]}: one failure per route and status, its first error and how many
// answers failed.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [documentPath, answersPath] = process.argv.slice(2);
const doc = JSON.parse(readFileSync(documentPath, "utf8"));
const answers = JSON.parse(readFileSync(answersPath, "utf8"));

// strict: false: the document's OpenAPI keywords (paths, responses) sit around
// the schemas, which are resolved by JSON pointer into it.
const ajv = new Ajv2020({ strict: false, allErrors: false });
addFormats(ajv);
ajv.addSchema(doc, "openapi.json");

const escape = (s) => s.replaceAll("~", "~0").replaceAll("/", "~1");
const at = (pointer) =>
  pointer.split("/").slice(1).reduce((v, k) => v?.[k.replaceAll("~1", "/").replaceAll("~0", "~")], doc);

// The pointer to a route's answer schema for a status, following a
// `$ref`'d response; or why there is none.
function schemaPointer(method, path, status) {
  let pointer = `/paths/${escape(path)}/${method.toLowerCase()}`;
  if (!at(pointer)) return { error: `${method} ${path} is not in the document` };
  pointer += `/responses/${status}`;
  let response = at(pointer);
  if (!response) return { error: `status ${status} is not documented for ${method} ${path}` };
  if (response.$ref) {
    pointer = response.$ref.slice(1);
    response = at(pointer);
  }
  if (!response?.content?.["application/json"]?.schema) {
    return { error: `${method} ${path} ${status} documents no JSON body` };
  }
  return { pointer: `${pointer}/content/application~1json/schema` };
}

const validators = new Map();
const failures = new Map();
const routes = new Set();
let ok = 0;
for (const { method, path, status, body } of answers) {
  const key = `${method} ${path} ${status}`;
  routes.add(`${method} ${path}`);
  if (!validators.has(key)) {
    const found = schemaPointer(method, path, status);
    validators.set(key, found.error ?? ajv.compile({ $ref: `openapi.json#${found.pointer}` }));
  }
  const validate = validators.get(key);
  let error = typeof validate === "string" ? validate : null;
  if (!error && !validate(body)) {
    const e = validate.errors[0];
    error = `${e.instancePath || "the body"} ${e.message}${e.params ? " " + JSON.stringify(e.params) : ""}`;
  }
  if (!error) {
    ok += 1;
    continue;
  }
  const failed = failures.get(key) ?? { method, path, status, count: 0, error: null };
  failed.count += 1;
  failed.error ??= `${error} (in ${JSON.stringify(body).slice(0, 300)})`;
  failures.set(key, failed);
}
for (const f of failures.values()) f.error = `${f.count} answer(s) do not match: ${f.error}`;
console.log(JSON.stringify({ answers: ok, routes: routes.size, failures: [...failures.values()] }));
